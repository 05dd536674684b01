package embedded

import (
	"fmt"
	"path/filepath"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/diskfs"
)

// The upgrade of a format-1 log (records without chain hashes) to format 2,
// once, at Open. The log is rewritten, its chain computed from position 0,
// to log.tmp, which is synced and renamed over log (then the directory is
// synced); the sealed file, whose offsets the rewrite changes, is removed
// before the rename. A crash at any point leaves either the format-1 log
// (and the next Open upgrades it again) or the format-2 one, and both open.
//
// The upgrade applies the recovery rules of format 1 to what it copies: it
// stops at the end of the last complete commit; a bad record that a later
// write proves was synced fails it with eventstore.ErrCorrupt and changes
// nothing. Recovery then checks the new log as it checks any other.

// upgradeChunk is how many bytes of format-2 records the upgrade buffers
// before it writes them.
const upgradeChunk = 4 << 20

// upgradeV1 rewrites dir's format-1 log in format 2.
func (s *Store) upgradeV1() error {
	path := filepath.Join(s.dir, logName)
	old, err := s.fs.Open(path)
	if err != nil {
		return fmt.Errorf("embedded: upgrading the log: %w", err)
	}
	defer func() { _ = old.Close() }() // read-only: nothing to lose
	size, err := old.Size()
	if err != nil {
		return fmt.Errorf("embedded: upgrading the log: %w", err)
	}
	tmp := path + tmpSuffix
	out, err := s.fs.Create(tmp)
	if err != nil {
		return fmt.Errorf("embedded: upgrading the log: %w", err)
	}
	events, err := copyV1(old, size, out)
	if err == nil && !s.opts.NoSync {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = s.fs.Remove(tmp) // the format-1 log is untouched: that error is the one to report
		return fmt.Errorf("embedded: upgrading the log to format %d: %w", formatVersion, err)
	}
	if err := s.fs.Remove(filepath.Join(s.dir, sealedName)); err != nil && !diskfs.IsNotExist(err) {
		return fmt.Errorf("embedded: upgrading the log: removing the old sealed file: %w", err)
	}
	if err := s.fs.Rename(tmp, path); err != nil {
		return fmt.Errorf("embedded: upgrading the log: %w", err)
	}
	if err := s.syncDir(); err != nil {
		return fmt.Errorf("embedded: upgrading the log: %w", err)
	}
	s.log.Info("log upgraded to format 2: every event carries its chain hash", "events", events)
	return nil
}

// copyV1 writes the format-2 header and the records of every complete
// commit of the format-1 log f (size bytes) to out, with their chain
// hashes, and returns how many events it wrote.
func copyV1(f diskfs.File, size int64, out diskfs.File) (uint64, error) {
	w := window{v1: true, f: f, size: size}
	var (
		r      rec
		c      eventstore.Chainer
		prev   domain.Hash
		next   uint64 // the position the next record must hold
		off    = int64(headerSize)
		buf    = logHeader()
		commit = len(buf) // buf up to the last complete commit
		events uint64     // written or buffered up to commit
	)
	for off < size {
		n, st, err := w.record(off, &r)
		if err != nil {
			return 0, err
		}
		if st != recOK {
			if err := checkTornAt(&w, off, st, next); err != nil {
				return 0, err
			}
			break
		}
		if r.position != next {
			return 0, corruptError(logName, off, fmt.Sprintf("position %d: the record there holds position %d (an event is missing or out of order)", next, r.position))
		}
		e := envelopeView(&r)
		prev = c.Next(prev, &e)
		buf = appendRecord(buf, e.Stream, &e, r.position, r.version, r.micros, r.inWrite, r.flags&flagCommit != 0, &prev)
		next++
		off += int64(n)
		if r.flags&flagCommit == 0 {
			continue
		}
		commit, events = len(buf), next
		if commit >= upgradeChunk {
			if _, err := out.Write(buf); err != nil {
				return 0, err
			}
			buf, commit = buf[:0], 0
		}
	}
	if _, err := out.Write(buf[:commit]); err != nil {
		return 0, err
	}
	return events, nil
}
