package embedded

// Trim and Start (eventstore.Trimmer): the live log gives up a prefix that
// has been archived.
//
// A trim to position B, under the seal lock (no seal runs meanwhile):
//
//  1. seals the log up to at least B, so that the sealed part holds every
//     position below B;
//  2. writes a new sealed file of positions [B, sealed end) (sealed.tmp),
//     and works out the streams that continue across B: the kept ones, the
//     ones with events at or after B, each with its versions below B;
//  3. hands both to the committer, which installs them between two group
//     commits (so an append sees the old versions or the new ones, never a
//     mix) and adds any stream an append created since step 2 that had
//     versions below B;
//  4. renames sealed.tmp over sealed (the directory synced): a crash after
//     it and before step 5 leaves a sealed file that does not match the
//     start file, which Open ignores (it scans the live log instead);
//  5. writes the start file atomically (temporary file, fsync, rename,
//     fsync of the directory): from here on the trim survives a crash;
//  6. removes the segment files wholly below the segment that holds B, and
//     syncs the directory. A crash before it is done leaves files that Open
//     (or the next Trim) removes.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
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
	sl := s.sealed
	hot := make(map[*stream]bool, len(s.streams))
	hotNames := make(map[string]bool, len(s.streams))
	for name, st := range s.streams {
		hot[st] = true
		hotNames[name] = true
	}
	s.mu.RUnlock()
	if sl.n < before {
		return fmt.Errorf("embedded: trim: the sealed part ends at %d, below %d", sl.n, before) // never happens
	}
	firstOff := sl.end
	if before < sl.n {
		var two [2]int64
		var buf [16]byte
		if err := sl.offsets(before, two[:], buf[:]); err != nil {
			return fmt.Errorf("embedded: trim: %w", err)
		}
		firstOff = two[0]
	}
	keepSet := make(map[string]bool, len(keep))
	for _, name := range keep {
		keepSet[name] = true
	}
	tmp := filepath.Join(s.dir, sealedName+tmpSuffix)
	ns, kept, err := writeTrimmedSealed(s.fs, tmp, sl, before, firstOff, trimRule{old: cur.kept, keep: keepSet, hot: hotNames}, !s.opts.NoSync)
	if err != nil {
		return fmt.Errorf("embedded: trim: writing %s: %w", sealedName, err)
	}
	if ns.events() > 0 {
		if ns.f, err = s.fs.Open(tmp); err != nil {
			return fmt.Errorf("embedded: trim: %w", err)
		}
	}
	ns.reads = &s.lookups
	seg := s.f.holding(before)
	st := &startState{first: before, off: firstOff, segFirst: seg.first, segBase: seg.base, prev: prev, kept: kept}
	ns.trim = &trimInstall{start: st, hot: hot}

	// 3. Install.
	if s.trimHook != nil {
		s.trimHook()
	}
	if err := s.handOver(ns); err != nil {
		return err
	}
	if ns.trim.err != nil {
		return fmt.Errorf("embedded: trim: %w", ns.trim.err)
	}

	// 4. The sealed file.
	if ns.f != nil {
		err = s.fs.Rename(tmp, filepath.Join(s.dir, sealedName))
	} else {
		err = s.fs.Remove(filepath.Join(s.dir, sealedName))
		if isNotExist(err) {
			err = nil
		}
	}
	if err == nil {
		err = s.syncDir()
	}
	if err != nil {
		return fmt.Errorf("embedded: trim: replacing %s: %w", sealedName, err)
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
	gone := s.f.dropBefore(st.segFirst)
	if len(gone) == 0 {
		return nil
	}
	var errs []error
	for _, sg := range gone {
		sg.gone.Store(true)
		_ = sg.f.Close() // read-only; a reader that meets it gets a TrimmedError
		if err := s.fs.Remove(sg.path); err != nil && !isNotExist(err) {
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
func (s *Store) handOver(ns *sealed) error {
	s.pending.Store(ns)
	s.poke()
	select {
	case <-s.sealDone:
		return nil
	case <-s.committerDone:
		if ns.trim != nil && s.pending.CompareAndSwap(ns, nil) && ns.f != nil {
			_ = ns.f.Close() // read-only, never installed
		}
		return eventstore.ErrClosed
	}
}

// installTrim installs the sealed part and start of a trim (committer
// only, from installSeal). A stream that an append created since the trim
// looked at the hot streams, and that had versions below the new start,
// continues them: it joins the kept streams.
func (s *Store) installTrim(ns *sealed) {
	t := ns.trim
	if ns.n != s.base {
		t.err = fmt.Errorf("the sealed part moved from %d to %d during the trim", ns.n, s.base) // never happens: seals wait for the trim
		if ns.f != nil {
			_ = ns.f.Close()
		}
		return
	}
	for name, st := range s.streams {
		if t.hot[st] || st.sealed == 0 {
			continue
		}
		if _, ok := t.start.kept[name]; ok {
			continue
		}
		ss, _, err := ns.findStream(name)
		if err != nil {
			t.err = err
			if ns.f != nil {
				_ = ns.f.Close()
			}
			return
		}
		if st.sealed > ss.count {
			t.start.kept[name] = st.sealed - ss.count
		}
	}
	s.mu.Lock()
	s.start, s.sealed = t.start, ns
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
func (r *trimRule) continues(name string, gone, live uint64) bool {
	return gone > 0 && (live > 0 || r.keep[name] || r.hot[name])
}

// writeTrimmedSealed writes to path the sealed file of old's positions from
// first on: their record offsets, ids, and the streams with events among
// them. It returns its in-memory state (without its file; with no file at
// all if no position is left) and the streams that continue across first
// with their versions below it.
func writeTrimmedSealed(fsys fileSystem, path string, old *sealed, first uint64, firstOff int64, rule trimRule, doSync bool) (_ *sealed, _ map[string]uint64, err error) {
	le := binary.LittleEndian
	kept := map[string]uint64{}
	section := func(off, n int64) *bufio.Reader {
		return bufio.NewReaderSize(io.NewSectionReader(old.f, off, n), 256<<10)
	}
	// Pass 1: each stream's events below first.
	below := make([]uint64, old.m)
	seen := map[string]bool{}
	if old.events() > 0 {
		streams := section(old.streamsOff, old.listsOff-old.streamsOff)
		lists := section(old.listsOff, 8*int64(old.events()))
		eb := make([]byte, 256+streamFixed)
		var e streamEntry
		var b [8]byte
		for i := range old.m {
			if err := readStreamEntry(streams, &e, eb); err != nil {
				return nil, nil, err
			}
			for range e.count {
				if _, err := io.ReadFull(lists, b[:]); err != nil {
					return nil, nil, err
				}
				if le.Uint64(b[:]) < first {
					below[i]++
				}
			}
			name := string(e.name)
			gone := rule.old[name] + below[i]
			if rule.continues(name, gone, e.count-below[i]) {
				kept[name] = gone
			}
			if rule.old[name] > 0 {
				seen[name] = true
			}
		}
	}
	for name, gone := range rule.old {
		if !seen[name] && rule.continues(name, gone, 0) {
			kept[name] = gone
		}
	}
	n := old.n - first
	if n == 0 {
		return emptySealed(first, firstOff), kept, nil
	}

	// Pass 2: the file.
	_ = fsys.Remove(path) // a new file, never one a reader may still have open
	f, err := fsys.Create(path)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			_ = f.Close() // the write error is the one to report
		}
	}()
	ns := &sealed{first: first, firstOff: firstOff, n: old.n, end: old.end, ids: newBloom(int(n))}
	w := &crcWriter{w: bufio.NewWriterSize(f, 1<<20)}
	var b []byte
	b = append(b, sealedMagic...)
	b = le.AppendUint32(b, sealedFormat)
	b = le.AppendUint32(b, 0)
	if _, err := w.Write(b); err != nil {
		return nil, nil, err
	}
	if _, err := io.Copy(w, section(sealedHeaderSize+8*int64(first-old.first), 8*int64(n))); err != nil {
		return nil, nil, err
	}
	// Ids of the positions left, still sorted.
	ns.idsOff = w.n
	ids := section(old.idsOff, idEntrySize*int64(old.events()))
	var ent [idEntrySize]byte
	k := uint64(0)
	for range old.events() {
		if _, err := io.ReadFull(ids, ent[:]); err != nil {
			return nil, nil, err
		}
		if le.Uint64(ent[16:]) < first {
			continue
		}
		id := uuid.UUID(ent[:16])
		if k%fenceEvery == 0 {
			ns.idFence = append(ns.idFence, idPrefix(&id))
		}
		ns.ids.add(hashID(id))
		k++
		if _, err := w.Write(ent[:]); err != nil {
			return nil, nil, err
		}
	}
	if k != n {
		return nil, nil, fmt.Errorf("%w: %d ids at or after position %d, want %d", errBadSealed, k, first, n)
	}
	// Streams with events left, and their lists.
	ns.streamsOff = w.n
	streams := section(old.streamsOff, old.listsOff-old.streamsOff)
	eb := make([]byte, 256+streamFixed)
	var e streamEntry
	var names [][]byte
	idx := uint64(0)
	for i := range old.m {
		if err := readStreamEntry(streams, &e, eb); err != nil {
			return nil, nil, err
		}
		c := e.count - below[i]
		if c == 0 {
			continue
		}
		if ns.m%nameFenceEvery == 0 {
			ns.nameFence = append(ns.nameFence, string(e.name))
			ns.nameOff = append(ns.nameOff, w.n)
		}
		names = append(names, slices.Clone(e.name))
		ns.m++
		if _, err := w.Write(appendStreamEntry(b[:0], e.name, c, idx)); err != nil {
			return nil, nil, err
		}
		idx += c
	}
	ns.names = newBloom(len(names))
	for _, name := range names {
		ns.names.add(hashNameB(name))
	}
	ns.listsOff = w.n
	lists := section(old.listsOff, 8*int64(old.events()))
	streams = section(old.streamsOff, old.listsOff-old.streamsOff)
	var p [8]byte
	for range old.m {
		if err := readStreamEntry(streams, &e, eb); err != nil {
			return nil, nil, err
		}
		for range e.count {
			if _, err := io.ReadFull(lists, p[:]); err != nil {
				return nil, nil, err
			}
			if le.Uint64(p[:]) >= first {
				if _, err := w.Write(p[:]); err != nil {
					return nil, nil, err
				}
			}
		}
	}
	ft := sealedFooter{first: first, firstOff: firstOff, n: old.n, end: old.end, m: ns.m, idsOff: ns.idsOff, streamsOff: ns.streamsOff, listsOff: ns.listsOff}
	if _, err := w.Write(ft.append(b[:0])); err != nil {
		return nil, nil, err
	}
	if _, err := w.w.Write(le.AppendUint32(nil, w.crc)); err != nil {
		return nil, nil, err
	}
	if err := w.w.Flush(); err != nil {
		return nil, nil, err
	}
	if doSync {
		if err := f.Sync(); err != nil {
			return nil, nil, err
		}
	}
	return ns, kept, f.Close()
}
