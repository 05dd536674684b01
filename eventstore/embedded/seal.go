package embedded

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// sealLoop seals in the background when the committer asks (maybeSeal).
// After a failed seal it waits sealRetry before it tries again.
func (s *Store) sealLoop() {
	defer close(s.ckptDone)
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

// sealDivisor: the hot part may grow to a 1/sealDivisor share of the sealed
// part. Each seal rewrites the sealed file, so this bounds the rewriting to
// sealDivisor times the sealed file's bytes per event (about 45 each), and
// keeps the hot part's memory (about 60 bytes an event) to a few bytes per
// event of the log.
const sealDivisor = 32

// Seals in a burst. Each seal rewrites the whole sealed file, so while
// appends pour in (a burst of tens of thousands a second) seals every
// HotEvents events cost a tenth of the CPU, taken from the appends. A seal
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
// max(HotEvents, sealed/sealDivisor) events (in a burst, see sealSpacing).
// Committer only (or Open).
func (s *Store) maybeSeal() {
	if s.opts.HotEvents < 0 {
		return
	}
	hot, target := s.head.Load()-s.base, max(uint64(s.opts.HotEvents), s.base/sealDivisor)
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
	if err != nil || ns == nil {
		return err
	}
	s.pending.Store(ns)
	s.poke()
	select {
	case <-s.sealDone:
	case <-s.committerDone:
	}
	return nil
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
	if ns.n <= s.base || ns.n > s.next {
		_ = ns.f.Close() // never happens: seals are serialised and cover committed events
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

// writeSeal writes the sealed file for every committed event, unless the
// sealed part already covers them all (nil, nil). With open, the new file is
// opened for reading, ready to install.
func (s *Store) writeSeal(open bool) (*sealed, error) {
	s.mu.RLock()
	h, base, old, end := s.head.Load(), s.base, s.sealed, s.end
	k := h - base
	hot := hotPart{offsets: s.offsets[:k], ids: s.posID[:k], streams: s.posStream[:k]}
	s.mu.RUnlock()
	if k == 0 {
		return nil, nil
	}
	tmp := filepath.Join(s.dir, sealedName+tmpSuffix)
	path := filepath.Join(s.dir, sealedName)
	ns, err := writeSealedFile(s.fs, tmp, old, base, &hot, end, !s.opts.NoSync)
	if err == nil {
		err = s.fs.Rename(tmp, path)
	}
	if err == nil {
		err = s.syncDir()
	}
	if err == nil && open {
		ns.f, err = s.fs.Open(path)
		ns.reads = &s.lookups
	}
	if err != nil {
		return nil, fmt.Errorf("embedded: writing %s: %w", sealedName, err)
	}
	// The index file of earlier versions is stale from now on.
	_ = s.fs.Remove(filepath.Join(s.dir, oldIndexName))
	return ns, nil
}

// hotPart is the committed hot positions [base, base+len(offsets)) a seal
// merges into the sealed file.
type hotPart struct {
	offsets []int64
	ids     []uuid.UUID
	streams []*stream
}

// idPos is an id (as two big-endian halves, which sort as the bytes do) and
// its position.
type idPos struct {
	hi, lo, pos uint64
}

func (a idPos) id() uuid.UUID {
	var id uuid.UUID
	binary.BigEndian.PutUint64(id[:8], a.hi)
	binary.BigEndian.PutUint64(id[8:], a.lo)
	return id
}

// hotStream is one stream's events in the hot part.
type hotStream struct {
	name      string
	positions []uint64
}

// sorted returns the hot part's ids and streams sorted (bounded by the hot
// part's size).
func (h *hotPart) sorted(base uint64) ([]idPos, []hotStream) {
	ids := make([]idPos, len(h.ids))
	for i, id := range h.ids {
		ids[i] = idPos{binary.BigEndian.Uint64(id[:8]), binary.BigEndian.Uint64(id[8:]), base + uint64(i)}
	}
	slices.SortFunc(ids, func(a, b idPos) int {
		if c := cmp.Compare(a.hi, b.hi); c != 0 {
			return c
		}
		return cmp.Compare(a.lo, b.lo)
	})
	index := make(map[*stream]int, len(h.streams)/4)
	var counts []int
	for _, st := range h.streams {
		j, ok := index[st]
		if !ok {
			j = len(counts)
			index[st] = j
			counts = append(counts, 0)
		}
		counts[j]++
	}
	backing := make([]uint64, len(h.streams))
	streams := make([]hotStream, len(counts))
	for st, j := range index {
		streams[j].name = st.name
		streams[j].positions, backing = backing[:0:counts[j]], backing[counts[j]:]
	}
	for i, st := range h.streams {
		j := index[st]
		streams[j].positions = append(streams[j].positions, base+uint64(i))
	}
	slices.SortFunc(streams, func(a, b hotStream) int { return strings.Compare(a.name, b.name) })
	return ids, streams
}

// lessID reports whether the id in b sorts before a's.
func lessID(b []byte, a *idPos) bool {
	hi := binary.BigEndian.Uint64(b)
	return hi < a.hi || hi == a.hi && binary.BigEndian.Uint64(b[8:]) < a.lo
}

// crcWriter writes through a bufio.Writer, counts the bytes and keeps a
// CRC-32C of them.
type crcWriter struct {
	w   *bufio.Writer
	crc uint32
	n   int64
}

func (c *crcWriter) Write(b []byte) (int, error) {
	c.crc = crc32.Update(c.crc, castagnoli, b)
	c.n += int64(len(b))
	return c.w.Write(b)
}

// writeSealedFile writes to path the sealed file of positions [0,
// base+len(hot)): old's sections merged with the hot part, read and written
// sequentially. It returns the new sealed part's in-memory state (without
// its file).
func writeSealedFile(fsys fileSystem, path string, old *sealed, base uint64, hot *hotPart, end int64, doSync bool) (_ *sealed, err error) {
	_ = fsys.Remove(path) // a new file, never one a reader may still have open (see Trim)
	f, err := fsys.Create(path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = f.Close() // the write error is the one to report
		}
	}()
	hotIDs, hotStreams := hot.sorted(base)
	n := base + uint64(len(hot.offsets))
	ns := &sealed{first: old.first, firstOff: old.firstOff, n: n, end: end, ids: newBloom(int(n - old.first)), names: newBloom(int(old.m) + len(hotStreams))}
	w := &crcWriter{w: bufio.NewWriterSize(f, 1<<20)}
	le := binary.LittleEndian
	b := make([]byte, 0, 64<<10)
	flush := func(room int) error {
		if cap(b)-len(b) >= room {
			return nil
		}
		_, err := w.Write(b)
		b = b[:0]
		return err
	}
	section := func(off, n int64) *bufio.Reader {
		return bufio.NewReaderSize(io.NewSectionReader(old.f, off, n), 256<<10)
	}

	b = append(b, sealedMagic...)
	b = le.AppendUint32(b, sealedFormat)
	b = le.AppendUint32(b, 0)
	// Record offsets.
	if old.events() > 0 {
		if err := flush(cap(b)); err != nil {
			return nil, err
		}
		if _, err := io.Copy(w, section(sealedHeaderSize, 8*int64(old.events()))); err != nil {
			return nil, err
		}
	}
	for _, off := range hot.offsets {
		if err := flush(8); err != nil {
			return nil, err
		}
		b = le.AppendUint64(b, uint64(off))
	}
	// Sorted ids: the old ones merged with the hot ones.
	if err := flush(cap(b)); err != nil {
		return nil, err
	}
	ns.idsOff = w.n
	var oldIDs *bufio.Reader
	if old.events() > 0 {
		oldIDs = section(old.idsOff, idEntrySize*int64(old.events()))
	}
	var cur [idEntrySize]byte
	haveOld, oldLeft := false, old.events()
	nextOld := func() error {
		if oldLeft == 0 {
			haveOld = false
			return nil
		}
		oldLeft--
		haveOld = true
		_, err := io.ReadFull(oldIDs, cur[:])
		return err
	}
	if err := nextOld(); err != nil {
		return nil, err
	}
	for i := range n - old.first {
		var id uuid.UUID
		var pos uint64
		if haveOld && (len(hotIDs) == 0 || lessID(cur[:16], &hotIDs[0])) {
			id, pos = uuid.UUID(cur[:16]), le.Uint64(cur[16:])
			if err := nextOld(); err != nil {
				return nil, err
			}
		} else {
			id, pos = hotIDs[0].id(), hotIDs[0].pos
			hotIDs = hotIDs[1:]
		}
		if i%fenceEvery == 0 {
			ns.idFence = append(ns.idFence, idPrefix(&id))
		}
		ns.ids.add(hashID(id))
		if err := flush(idEntrySize); err != nil {
			return nil, err
		}
		b = append(b, id[:]...)
		b = le.AppendUint64(b, pos)
	}
	// Streams, then their positions lists, in name order.
	if err := flush(cap(b)); err != nil {
		return nil, err
	}
	ns.streamsOff = w.n
	first := uint64(0)
	err = mergeStreams(old, hotStreams, func(name []byte, oldCount uint64, hotPos []uint64) error {
		if ns.m%nameFenceEvery == 0 {
			ns.nameFence = append(ns.nameFence, string(name))
			ns.nameOff = append(ns.nameOff, w.n+int64(len(b)))
		}
		ns.names.add(hashNameB(name))
		ns.m++
		count := oldCount + uint64(len(hotPos))
		if err := flush(streamFixed + len(name)); err != nil {
			return err
		}
		b = appendStreamEntry(b, name, count, first)
		first += count
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := flush(cap(b)); err != nil {
		return nil, err
	}
	ns.listsOff = w.n
	var oldLists *bufio.Reader
	if old.events() > 0 {
		oldLists = section(old.listsOff, 8*int64(old.events()))
	}
	err = mergeStreams(old, hotStreams, func(name []byte, oldCount uint64, hotPos []uint64) error {
		// The old list, through b in pieces of at most its capacity (no
		// buffer allocated per stream).
		for left := 8 * int(oldCount); left > 0; {
			k := min(left, cap(b))
			if err := flush(k); err != nil {
				return err
			}
			n := len(b)
			b = b[:n+k]
			if _, err := io.ReadFull(oldLists, b[n:]); err != nil {
				return err
			}
			left -= k
		}
		for _, p := range hotPos {
			if err := flush(8); err != nil {
				return err
			}
			b = le.AppendUint64(b, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := flush(cap(b)); err != nil {
		return nil, err
	}
	ft := sealedFooter{first: old.first, firstOff: old.firstOff, n: n, end: end, m: ns.m, idsOff: ns.idsOff, streamsOff: ns.streamsOff, listsOff: ns.listsOff}
	if _, err := w.Write(ft.append(b[:0])); err != nil {
		return nil, err
	}
	if _, err := w.w.Write(le.AppendUint32(nil, w.crc)); err != nil {
		return nil, err
	}
	if err := w.w.Flush(); err != nil {
		return nil, err
	}
	if doSync {
		if err := f.Sync(); err != nil {
			return nil, err
		}
	}
	return ns, f.Close()
}

// mergeStreams calls emit for every stream of old and of hot, in name
// order, with its old count and its hot positions. It reads old's streams
// section sequentially.
func mergeStreams(old *sealed, hot []hotStream, emit func(name []byte, oldCount uint64, hotPos []uint64) error) error {
	var r *bufio.Reader
	if old.m > 0 {
		r = bufio.NewReaderSize(io.NewSectionReader(old.f, old.streamsOff, old.listsOff-old.streamsOff), 256<<10)
	}
	buf := make([]byte, 256+streamFixed)
	var e streamEntry
	left := old.m
	for left > 0 || len(hot) > 0 {
		if left == 0 {
			if err := emit([]byte(hot[0].name), 0, hot[0].positions); err != nil {
				return err
			}
			hot = hot[1:]
			continue
		}
		if err := readStreamEntry(r, &e, buf); err != nil {
			return err
		}
		left--
		for len(hot) > 0 && compareName(e.name, hot[0].name) > 0 {
			if err := emit([]byte(hot[0].name), 0, hot[0].positions); err != nil {
				return err
			}
			hot = hot[1:]
		}
		var hotPos []uint64
		if len(hot) > 0 && compareName(e.name, hot[0].name) == 0 {
			hotPos = hot[0].positions
			hot = hot[1:]
		}
		if err := emit(e.name, e.count, hotPos); err != nil {
			return err
		}
	}
	return nil
}
