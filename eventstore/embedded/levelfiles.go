package embedded

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/turnstile/turnstile/eventstore/diskfs"
)

// The level files of the sealed part: a seal writes one, a merge makes one of
// several, and the files no level uses any more are removed.

// writeSeal writes a level file for the committed events that are not
// sealed yet (the hot part), unless there are none (nil, nil), and returns
// the sealed part with it as its newest level. With open, the new file is
// opened for reading, ready to install.
func (s *Store) writeSeal(open bool) (*index, error) {
	s.mu.RLock()
	h, base, old, end := s.head.Load(), s.base, s.sealed, s.end
	k := h - base
	hot := hotPart{offsets: s.offsets[:k], ids: s.posID[:k], streams: s.posStream[:k]}
	s.mu.RUnlock()
	if k == 0 {
		return nil, nil
	}
	name := levelName(base, h)
	path := filepath.Join(s.dir, name)
	tmp := path + tmpSuffix
	l, err := writeSealedFile(s.fs, tmp, emptySealed(base, hot.offsets[0]), base, &hot, end, !s.opts.NoSync)
	if err == nil {
		err = s.fs.Rename(tmp, path)
	}
	if err == nil {
		err = s.syncDir()
	}
	if err == nil && open {
		l.f, err = s.fs.Open(path)
		l.reads, l.name = &s.lookups, name
	}
	if err != nil {
		return nil, fmt.Errorf("embedded: writing %s: %w", name, err)
	}
	s.sealBytes.Add(uint64(l.size))
	// The index files of earlier versions are stale from now on.
	_ = s.fs.Remove(filepath.Join(s.dir, oldIndexName))
	x := old.with(l)
	x.fresh = []*sealed{l}
	return x, nil
}

// mergeDue merges the newest levels while a merge is due (index.toMerge),
// each merge handed to the committer to install, then removes the level
// files the sealed part no longer uses. Under ckptMu.
func (s *Store) mergeDue() error {
	merged := false
	for {
		s.mu.RLock()
		x := s.sealed
		s.mu.RUnlock()
		k := x.toMerge(s.levelUnit())
		if k == 0 {
			break
		}
		ls := x.levels[len(x.levels)-k:]
		name := levelName(ls[0].first, ls[len(ls)-1].n)
		path := filepath.Join(s.dir, name)
		l, err := mergeLevels(s.fs, path+tmpSuffix, ls, !s.opts.NoSync)
		if err == nil {
			err = s.fs.Rename(path+tmpSuffix, path)
		}
		if err == nil {
			err = s.syncDir()
		}
		if err == nil {
			l.f, err = s.fs.Open(path)
			l.reads, l.name = &s.lookups, name
		}
		if err != nil {
			return fmt.Errorf("embedded: merging levels into %s: %w", name, err)
		}
		s.sealBytes.Add(uint64(l.size))
		nx := newIndex(x.first, x.firstOff, append(x.levels[:len(x.levels)-k:len(x.levels)-k], l))
		nx.merged, nx.fresh = true, []*sealed{l}
		if err := s.handOver(nx); err != nil {
			return err
		}
		s.merges.Add(1)
		merged = true
	}
	if merged {
		return s.removeStaleLevels()
	}
	return nil
}

// levelUnit is the size of the smallest level tier: the hot part's target.
func (s *Store) levelUnit() uint64 {
	if s.opts.HotEvents > 0 {
		return uint64(s.opts.HotEvents)
	}
	return DefaultHotEvents
}

// removeStaleLevels removes the level files (and a sealed file of earlier
// versions) that the current sealed part does not use: replaced by a merge
// or a trim, or left half written by a crash. Readers that still use one
// keep their open file. Under ckptMu (so no level file is being written),
// or at Open.
func (s *Store) removeStaleLevels() error {
	names, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return err
	}
	s.mu.RLock()
	x := s.sealed
	s.mu.RUnlock()
	used := make(map[string]bool, len(x.levels))
	for _, l := range x.levels {
		used[l.name] = true
	}
	removed := false
	for _, name := range names {
		_, _, ok := parseLevelName(name)
		if tmp, isTmp := strings.CutSuffix(name, tmpSuffix); isTmp {
			_, _, ok = parseLevelName(tmp) // a level file a seal, merge or trim cut short
		}
		if (ok || name == sealedName) && !used[name] {
			if err := s.fs.Remove(filepath.Join(s.dir, name)); err != nil && !diskfs.IsNotExist(err) {
				return err
			}
			removed = true
		}
	}
	if removed {
		return s.syncDir()
	}
	return nil
}

// loadLevels loads the sealed part's levels: from the live log's start on,
// each time the level file that starts where the last one ended and reaches
// furthest (a merge cut short leaves both the merged file and its inputs),
// as long as one is intact and agrees with the log (checkSealed). What no
// usable level covers, recovery scans. An error means the log is corrupt or
// unreadable.
func (s *Store) loadLevels(size int64) (*index, error) {
	names, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("embedded: reading data directory: %w", err)
	}
	type cand struct {
		name     string
		first, n uint64
	}
	var cands []cand
	legacy := false
	for _, name := range names {
		if a, b, ok := parseLevelName(name); ok {
			cands = append(cands, cand{name, a, b})
		} else if name == sealedName {
			legacy = true
		}
	}
	x := newIndex(s.start.first, s.start.off, nil)
	fail := func(err error) (*index, error) {
		_ = x.closeFiles() // read-only; err is the one to report
		return nil, err
	}
	for {
		best := -1
		for i, c := range cands {
			if c.first == x.n && (best < 0 || c.n > cands[best].n) {
				best = i
			}
		}
		name := sealedName
		if best >= 0 {
			name = cands[best].name
			cands = slices.Delete(cands, best, best+1)
		} else if legacy && x.n == s.start.first {
			legacy = false // a sealed file of earlier versions: the first level, if it fits
		} else {
			break
		}
		sl, err := loadSealed(s.fs, filepath.Join(s.dir, name), size)
		if err == nil && sl == nil {
			continue
		}
		if err == nil && (sl.first != x.n || sl.firstOff != x.end) {
			err = fmt.Errorf("%w: it starts at position %d (offset %d), where the sealed part ends at %d (offset %d)", errBadSealed, sl.first, sl.firstOff, x.n, x.end)
			_ = sl.f.Close()
		}
		if err != nil {
			s.log.Warn("ignoring the sealed index "+name+"; scanning the log it would cover", "err", err)
			continue
		}
		last := s.last // the chain hash before the level, which checkSealed moves on
		ok, err := s.checkSealed(sl)
		if err != nil {
			_ = sl.f.Close() // the log is corrupt: that is the error to report
			return fail(err)
		}
		if !ok {
			s.last = last
			_ = sl.f.Close()
			continue
		}
		sl.reads = &s.lookups
		x = x.with(sl)
	}
	return x, nil
}
