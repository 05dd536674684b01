package embedded

import (
	"errors"
	"slices"
	"time"

	"github.com/turnstile/turnstile/eventstore"
)

// sealLoop seals in the background when the committer asks (maybeSeal).
// After a failed seal it waits sealRetry before it tries again.
func (s *Store) sealLoop() {
	defer close(s.ckptDone)
	s.ckptMu.Lock()
	err := s.mergeDue() // levels an earlier run left
	s.ckptMu.Unlock()
	if err != nil && !errors.Is(err, eventstore.ErrClosed) {
		s.log.Warn("merging the sealed part's levels failed", "err", err)
	}
	for {
		select {
		case <-s.ckptStop:
			return
		case <-s.ckptWake:
			if !s.waitSpacing() {
				return
			}
			err := s.sealBackground()
			select {
			case <-s.sealUrgent: // asked before this seal: stale now
			default:
			}
			if err != nil {
				s.log.Warn("sealing the index failed; the hot part grows until a seal succeeds", "err", err, "retry", sealRetry)
				select {
				case <-s.ckptStop:
					return
				case <-time.After(sealRetry):
				}
			}
		}
	}
}

// sealRetry is how long the store waits after a failed seal.
const sealRetry = 5 * time.Second

// Seals in a burst. Each seal writes a level file and may start merges, so
// while appends pour in (a burst of tens of thousands a second) seals every
// HotEvents events cost a share of the CPU, taken from the appends. A seal
// that would follow the last one within sealSpacing therefore waits, until
// the spacing has passed or the hot part has grown to sealBurst times its
// target (whether appends go on or not); at the steady rates of a long run
// (hundreds of appends a second) seals are minutes apart and nothing
// changes.
const (
	sealSpacing = 2 * time.Second
	sealBurst   = 4
)

// maybeSeal asks for a seal when the committed hot part has reached
// HotEvents events (in a burst, see sealSpacing).
// Committer only (or Open).
func (s *Store) maybeSeal() {
	if s.opts.HotEvents < 0 {
		return
	}
	hot, target := s.head.Load()-s.base, uint64(s.opts.HotEvents)
	if hot < target {
		return
	}
	select {
	case s.ckptWake <- struct{}{}:
	default:
	}
	if hot >= sealBurst*target {
		select {
		case s.sealUrgent <- struct{}{}:
		default:
		}
	}
}

// waitSpacing waits until sealSpacing has passed since the last seal was
// installed, or the committer says the hot part has grown to sealBurst times
// its target (maybeSeal). It reports false if the store is closing.
func (s *Store) waitSpacing() bool {
	last := s.lastSeal.Load()
	if last == 0 {
		return true
	}
	d := time.Duration(last + int64(s.sealSpacing) - time.Now().UnixNano())
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.sealUrgent:
	case <-s.ckptStop:
		return false
	}
	return true
}

// sealBackground writes a sealed file of the whole committed log, then
// hands it to the committer to install and waits until it has (or has
// stopped: Close installs it then).
func (s *Store) sealBackground() error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	ns, err := s.writeSeal(true)
	if err != nil {
		return err
	}
	if ns == nil {
		return s.mergeDue()
	}
	s.pending.Store(ns)
	s.poke()
	select {
	case <-s.sealDone:
	case <-s.committer.done:
		return nil // Close installs it
	}
	return s.mergeDue()
}

// installSeal makes a pending sealed part current: the committer runs it
// between group commits, when nothing is staged, so the hot structures hold
// exactly the committed positions from base on. It re-bases them at the new
// sealed size, and drops the streams whose events are now all sealed.
// Views taken before keep the old sealed part and old slices, which stay
// valid: their elements are never changed.
func (s *Store) installSeal() {
	ns := s.pending.Swap(nil)
	if ns == nil {
		return
	}
	defer func() {
		select {
		case s.sealDone <- struct{}{}:
		default:
		}
	}()
	if ns.trim != nil {
		s.installTrim(ns)
		return
	}
	if ns.merged {
		s.mu.Lock()
		s.sealed = ns
		s.mu.Unlock()
		return
	}
	if ns.n <= s.base || ns.n > s.next {
		_ = ns.levels[len(ns.levels)-1].f.Close() // never happens: seals are serialised and cover committed events
		return
	}
	k := ns.n - s.base
	offsets := slices.Clone(s.offsets[k:])
	posID := slices.Clone(s.posID[k:])
	posStream := slices.Clone(s.posStream[k:])
	ids := newIDIndex(len(posID))
	for i := range posID {
		ids.put(uint64(i), posID)
	}
	s.mu.Lock()
	for _, st := range s.posStream[:k] {
		if len(st.positions) == 0 || st.positions[0] >= ns.n {
			continue // done already
		}
		i, _ := slices.BinarySearch(st.positions, ns.n)
		st.sealed += uint64(i)
		st.committed -= i
		if i == len(st.positions) {
			delete(s.streams, st.name)
			st.positions = nil
			continue
		}
		st.positions = slices.Clone(st.positions[i:])
	}
	clear(s.recent[:]) // it may hold streams that left s.streams
	s.offsets, s.posID, s.posStream, s.ids = offsets, posID, posStream, ids
	s.sealed, s.base = ns, ns.n
	s.mu.Unlock()
	s.seals.Add(1)
	s.lastSeal.Store(time.Now().UnixNano())
	s.maybeSeal() // what committed while the seal was written may be enough for the next
}
