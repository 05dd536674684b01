package embedded

// Trim and Start (eventstore.Trimmer): the live log gives up a prefix that
// has been archived.
//
// A trim to position B, under the seal lock (no seal runs meanwhile):
//
//  1. seals the log up to at least B, so that the sealed part holds every
//     position below B;
//  2. writes the sealed part's levels from B on (see below), and works out
//     the streams that continue across B: the kept ones, the ones with
//     events at or after B, each with its versions below B;
//  3. hands both to the committer, which installs them between two group
//     commits (so an append sees the old versions or the new ones, never a
//     mix) and adds any stream an append created since step 2 that had
//     versions below B;
//  4. writes the start file atomically (temporary file, fsync, rename,
//     fsync of the directory): from here on the trim survives a crash;
//  5. removes the level files the sealed part no longer uses and the
//     segment files wholly below the segment that holds B, and syncs the
//     directory. A crash before it is done leaves files that Open (or the
//     next Trim) removes.
//
// Step 2 writes the level that holds B anew (as the level file of
// positions [B, its end)), and drops the levels below B: a crash before
// step 4 leaves a new level file that Open ignores (it does not start where
// the old start's levels lead), and one after it, old level files that no
// longer start where the new start's levels lead.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/diskfs"
)

var _ eventstore.Trimmer = (*Store)(nil)

// trimInstall rides on the sealed part a trim wrote: the start that comes
// with it.
type trimInstall struct {
	start *startState
	hot   map[*stream]bool // the hot streams when the trim looked at them
	err   error            // set by the committer if it could not install
}

// Start returns the live log's first position and the chain hash of the
// event before it; see eventstore.Trimmer.
func (s *Store) Start(ctx context.Context) (uint64, domain.Hash, error) {
	if err := s.readable(ctx); err != nil {
		return 0, domain.Hash{}, err
	}
	s.mu.RLock()
	st := s.start
	s.mu.RUnlock()
	return st.first, st.prev, nil
}

// Trim removes the positions below before from the live log and deletes the
// segment files that hold only such positions; see eventstore.Trimmer. The
// segment that holds before stays whole, so up to Options.SegmentBytes of
// trimmed records may stay on disk (unreadable) until a later trim. Appends
// go on while it runs; a trim holds up the committer only to install the
// new index. A stream in keep, or with events at or after before, continues
// its versions; every other stream with events below before is forgotten.
func (s *Store) Trim(ctx context.Context, before uint64, keep []string) error {
	if err := s.readable(ctx); err != nil {
		return err
	}
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	if s.isClosed() {
		return eventstore.ErrClosed
	}
	if head := s.head.Load(); before > head {
		return fmt.Errorf("embedded: trim before position %d: the log's head is %d", before, head)
	}
	s.mu.RLock()
	cur := s.start
	s.mu.RUnlock()
	if before <= cur.first {
		return s.finishTrim(cur) // nothing to move; finish a trim cut short
	}
	evs, err := s.ReadAll(ctx, before-1, 1)
	if err != nil {
		return fmt.Errorf("embedded: trim: reading the event before position %d: %w", before, err)
	}
	prev := evs[0].Hash

	// 1. Seal up to at least before.
	s.mu.RLock()
	sealedTo := s.base
	s.mu.RUnlock()
	if sealedTo < before {
		ns, err := s.writeSeal(true)
		if err != nil {
			return err
		}
		if ns != nil {
			if err := s.handOver(ns); err != nil {
				return err
			}
		}
	}

	// 2. The new sealed part and the streams that continue.
	s.mu.RLock()
	x := s.sealed
	hot := make(map[*stream]bool, len(s.streams))
	hotNames := make(map[string]bool, len(s.streams))
	for name, st := range s.streams {
		hot[st] = true
		hotNames[name] = true
	}
	s.mu.RUnlock()
	if x.n < before {
		return fmt.Errorf("embedded: trim: the sealed part ends at %d, below %d", x.n, before) // never happens
	}
	firstOff := x.end
	if before < x.n {
		var two [2]int64
		var buf [16]byte
		if err := x.offsets(before, two[:], buf[:]); err != nil {
			return fmt.Errorf("embedded: trim: %w", err)
		}
		firstOff = two[0]
	}
	keepSet := make(map[string]bool, len(keep))
	for _, name := range keep {
		keepSet[name] = true
	}
	kept, err := continuing(x, before, trimRule{old: cur.kept, keep: keepSet, hot: hotNames})
	if err != nil {
		return fmt.Errorf("embedded: trim: %w", err)
	}
	// The levels from before on: the one that holds before rewritten
	// without the positions below it, the later ones as they are.
	var levels, fresh []*sealed
	for _, l := range x.levels {
		switch {
		case l.n <= before:
		case l.first >= before:
			levels = append(levels, l)
		default:
			nl, err := s.writeTrimmedLevel(l, before, firstOff)
			if err != nil {
				for _, f := range fresh {
					_ = f.f.Close() // read-only, never installed
				}
				return err
			}
			levels, fresh = append(levels, nl), append(fresh, nl)
		}
	}
	seg := s.f.holding(before)
	st := &startState{first: before, off: firstOff, segFirst: seg.first, segBase: seg.base, prev: prev, kept: kept}
	nx := newIndex(before, firstOff, levels)
	nx.fresh = fresh
	nx.trim = &trimInstall{start: st, hot: hot}

	// 3. Install.
	if s.trimHook != nil {
		s.trimHook()
	}
	if err := s.handOver(nx); err != nil {
		return err
	}
	if nx.trim.err != nil {
		return fmt.Errorf("embedded: trim: %w", nx.trim.err)
	}

	// 5 and 6.
	return s.finishTrim(st)
}

// finishTrim makes the start st durable if it is not yet, then removes the
// segment files below the one that holds it. Under ckptMu.
func (s *Store) finishTrim(st *startState) error {
	if s.startWritten != st {
		if err := s.writeStart(st); err != nil {
			return err
		}
		s.startWritten = st
	}
	var errs []error
	if err := s.removeStaleLevels(); err != nil {
		errs = append(errs, err)
	}
	gone := s.f.dropBefore(st.segFirst)
	if len(gone) == 0 {
		return errors.Join(errs...)
	}
	for _, sg := range gone {
		sg.gone.Store(true)
		_ = sg.f.Close() // read-only; a reader that meets it gets a TrimmedError
		if err := s.fs.Remove(sg.path); err != nil && !diskfs.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	if err := s.syncDir(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("embedded: trim: removing segments (Open or the next Trim removes what is left): %w", err)
	}
	return nil
}

// handOver hands a sealed part to the committer to install and waits until
// it has. Under ckptMu.
func (s *Store) handOver(nx *index) error {
	s.pending.Store(nx)
	s.poke()
	select {
	case <-s.sealDone:
		return nil
	case <-s.committer.done:
		if (nx.trim != nil || nx.merged) && s.pending.CompareAndSwap(nx, nil) {
			for _, l := range nx.fresh {
				_ = l.f.Close() // read-only, never installed
			}
		}
		return eventstore.ErrClosed
	}
}

// installTrim installs the sealed part and start of a trim (committer
// only, from installSeal). A stream that an append created since the trim
// looked at the hot streams, and that had versions below the new start,
// continues them: it joins the kept streams.
func (s *Store) installTrim(nx *index) {
	t := nx.trim
	fail := func(err error) {
		t.err = err
		for _, l := range nx.fresh {
			_ = l.f.Close() // read-only, never installed
		}
	}
	if nx.n != s.base {
		fail(fmt.Errorf("the sealed part moved from %d to %d during the trim", nx.n, s.base)) // never happens: seals wait for the trim
		return
	}
	for name, st := range s.streams {
		if t.hot[st] || st.sealed == 0 {
			continue
		}
		if _, ok := t.start.kept[name]; ok {
			continue
		}
		// Its versions below its hot events: in a level, or all trimmed.
		if _, found, err := nx.count(name); err != nil {
			fail(err)
			return
		} else if !found {
			t.start.kept[name] = st.sealed
		}
	}
	s.mu.Lock()
	s.start, s.sealed = t.start, nx
	s.mu.Unlock()
}

// trimRule decides which streams continue across a trim.
type trimRule struct {
	old  map[string]uint64 // the current start's kept streams
	keep map[string]bool   // Trim's keep
	hot  map[string]bool   // streams with hot events (all at or after the new start)
}

// continues reports whether a stream whose events below the start number
// gone (old ones included), and above it live, goes on.
func (r *trimRule) continues(name string, gone uint64, live bool) bool {
	return gone > 0 && (live || r.keep[name] || r.hot[name])
}

// continuing returns the streams that continue across a trim of x at
// before, each with its versions below before: every stream with events
// in the levels below before, and every stream the current start keeps, is
// looked up in every level.
func continuing(x *index, before uint64, rule trimRule) (map[string]uint64, error) {
	kept := map[string]uint64{}
	consider := func(name string) error {
		if _, ok := kept[name]; ok {
			return nil // a stream in several levels
		}
		st, _, err := x.findStream(name)
		if err != nil {
			return err
		}
		// Its versions below before: those of its levels below before
		// (whose entries say their first version), or what the current
		// start keeps of it.
		gone, live := rule.old[name], false
		for _, p := range st.parts {
			if p.l.n <= before {
				gone = p.ss.base + p.ss.count
				continue
			}
			i := 0
			if p.l.first < before {
				ps, err := p.l.positions(p.ss, 0, p.ss.count)
				if err != nil {
					return err
				}
				i, _ = slices.BinarySearch(ps, before)
			}
			gone = p.ss.base + uint64(i)
			if live = i < int(p.ss.count); live {
				break
			}
		}
		if rule.continues(name, gone, live) {
			kept[name] = gone
		}
		return nil
	}
	buf := make([]byte, 256+streamFixed)
	var e streamEntry
	for _, l := range x.levels {
		if l.first >= before {
			break
		}
		r := bufio.NewReaderSize(io.NewSectionReader(l.f, l.streamsOff, l.listsOff-l.streamsOff), 256<<10)
		for range l.m {
			if err := readStreamEntry(r, &e, buf); err != nil {
				return nil, err
			}
			if err := consider(string(e.name)); err != nil {
				return nil, err
			}
		}
	}
	for name := range rule.old {
		if err := consider(name); err != nil {
			return nil, err
		}
	}
	return kept, nil
}
