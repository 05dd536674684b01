package archive

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// DefaultSegmentEvents is how many events a segment holds at most, unless
// SetSegmentEvents says otherwise.
const DefaultSegmentEvents = 1_000_000

// blockEvents is how many events one gzip member of a segment holds: a
// stream lookup decompresses at most one member per event it reads.
const blockEvents = 4096

// readBatch is how many events Write reads from its source at once.
const readBatch = 4096

// SetSegmentEvents sets how many events a segment written from now on holds
// at most (n > 0).
func (a *Archive) SetSegmentEvents(n int) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	a.segEvents = n
}

// Write archives positions [from, to) of src: it writes segments of at most
// SetSegmentEvents events each, reading src with ReadAll. A segment is
// written to a temporary file, synced, renamed into place and the directory
// synced; then its index, the same way. So after a crash a segment is either
// whole with its index, or without an index (and written again), or absent.
//
// Temporary files that an interrupted Write left are removed. Write is
// idempotent: the part of [from, to) already archived must be made
// of whole segments (from at a segment's first position, and to, if it falls
// inside the archive, just after a segment's last), and is checked against
// src, event by event through the chain hash, instead of written again; a
// range that cuts a segment is an error, and so is one that leaves a gap
// after the archive's end. The events' chain hashes are checked on the way:
// Write refuses to archive a log whose stored hashes do not chain, and fills
// the hash of events from a store that keeps no chain. An empty archive may
// start at any position; its first segment chains after the hash src holds
// for the event before from (the zero Hash at 0).
func (a *Archive) Write(ctx context.Context, src eventstore.Store, from, to uint64) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if from > to {
		return fmt.Errorf("archive write: from %d is after to %d", from, to)
	}
	if from == to {
		return nil
	}
	a.removeTemps()
	segs := a.snapshot()
	end := endOf(segs)
	switch {
	case len(segs) > 0 && from > end:
		return fmt.Errorf("archive write: positions %d..%d would leave a gap after the archive's end %d", end, from-1, end)
	case len(segs) > 0 && from < segs[0].First:
		return fmt.Errorf("archive write: from %d is before the archive's first position %d", from, segs[0].First)
	}
	if from < end {
		upTo := min(to, end)
		if err := a.check(ctx, src, segs, from, upTo); err != nil {
			return err
		}
		from = upTo
	}
	if from == to {
		return nil
	}
	var prev domain.Hash
	if len(segs) > 0 {
		prev = segs[len(segs)-1].LastHash
	} else if from > 0 {
		h, err := hashBefore(ctx, src, from)
		if err != nil {
			return err
		}
		prev = h
	}
	n := uint64(a.segEvents)
	if n == 0 {
		n = DefaultSegmentEvents
	}
	for from < to {
		last := min(from+n, to) - 1
		s, err := a.writeSegment(ctx, src, from, last, prev)
		if err != nil {
			return err
		}
		a.mu.Lock()
		a.segs = append(slices.Clip(a.segs), s)
		a.mu.Unlock()
		prev, from = s.LastHash, last+1
	}
	return nil
}

// hashBefore returns the chain hash src holds for the event before pos.
func hashBefore(ctx context.Context, src eventstore.Store, pos uint64) (domain.Hash, error) {
	if t, ok := src.(eventstore.Trimmer); ok {
		first, prev, err := t.Start(ctx)
		if err != nil {
			return domain.Hash{}, err
		}
		if first == pos {
			return prev, nil
		}
	}
	evs, err := src.ReadAll(ctx, pos-1, 1)
	if err != nil {
		return domain.Hash{}, fmt.Errorf("archive write: the chain hash before position %d: %w", pos, err)
	}
	if len(evs) != 1 || evs[0].Position != pos-1 || evs[0].Hash.IsZero() {
		return domain.Hash{}, fmt.Errorf("archive write: an empty archive starting at %d needs the chain hash of position %d, which the log does not give", pos, pos-1)
	}
	return evs[0].Hash, nil
}

// source reads src's events from one position on, densely, checking (or
// filling) their chain hashes.
type source struct {
	src   eventstore.Store
	next  uint64
	prev  domain.Hash
	buf   []domain.Envelope
	chain eventstore.Chainer
}

func (r *source) read(ctx context.Context) (*domain.Envelope, error) {
	if len(r.buf) == 0 {
		evs, err := r.src.ReadAll(ctx, r.next, readBatch)
		if err != nil {
			return nil, fmt.Errorf("archive write: read the log from %d: %w", r.next, err)
		}
		if len(evs) == 0 {
			return nil, fmt.Errorf("archive write: the log ends before position %d", r.next)
		}
		r.buf = evs
	}
	e := &r.buf[0]
	r.buf = r.buf[1:]
	if e.Position != r.next {
		return nil, fmt.Errorf("archive write: the log gave position %d where %d was due", e.Position, r.next)
	}
	h := r.chain.Next(r.prev, e)
	if e.Hash.IsZero() {
		e.Hash = h
	} else if e.Hash != h {
		return nil, fmt.Errorf("archive write: the log's chain hash at position %d is %s, but the events before it and the event give %s: the log does not verify", e.Position, e.Hash, h)
	}
	r.prev, r.next = h, r.next+1
	return e, nil
}

// check compares the segments covering [from, upTo) with src.
func (a *Archive) check(ctx context.Context, src eventstore.Store, segs []*segment, from, upTo uint64) error {
	first := find(segs, from)
	if first.First != from { // from is inside the archive: find finds its segment
		return fmt.Errorf("archive write: from %d cuts segment %s (a range partly archived)", from, first.Name)
	}
	if s := find(segs, upTo-1); s.Last != upTo-1 {
		return fmt.Errorf("archive write: to %d cuts segment %s (a range partly archived)", upTo, s.Name)
	}
	r := &source{src: src, next: from, prev: first.PrevHash}
	for pos := from; pos < upTo; {
		s := find(segs, pos)
		c, err := a.openCursor(s, pos)
		if err != nil {
			return err
		}
		for ; pos <= s.Last; pos++ {
			got, err := c.read()
			if err != nil {
				c.close()
				return err
			}
			want, err := r.read(ctx)
			if err != nil {
				c.close()
				return err
			}
			if got.Hash != want.Hash {
				c.close()
				return fmt.Errorf("%w: position %d in %s differs from the log's (chain hash %s, the log's %s)", ErrArchive, pos, s.Name, got.Hash, want.Hash)
			}
		}
		c.close()
	}
	return nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeSegment writes the segment [first, last] and its index.
func (a *Archive) writeSegment(ctx context.Context, src eventstore.Store, first, last uint64, prev domain.Hash) (*segment, error) {
	name := segmentFile(first, last)
	h := header{Format: indexFormat, First: first, Last: last, Count: last - first + 1, PrevHash: prev, FilterK: filterK}
	streams := map[string][]uint64{}
	sum := sha256.New()
	err := a.writeFile(name, func(w io.Writer) error {
		bw := bufio.NewWriterSize(io.MultiWriter(w, sum), 256<<10)
		cw := &countingWriter{w: bw}
		r := &source{src: src, next: first, prev: prev}
		var zw *gzip.Writer
		var line []byte
		for pos := first; pos <= last; pos++ {
			if (pos-first)%blockEvents == 0 {
				if zw != nil {
					if err := zw.Close(); err != nil {
						return err
					}
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				h.Blocks = append(h.Blocks, block{First: pos, Offset: cw.n})
				if zw == nil {
					zw = gzip.NewWriter(cw)
				} else {
					zw.Reset(cw)
				}
			}
			e, err := r.read(ctx)
			if err != nil {
				return err
			}
			line = appendLine(line[:0], e)
			if _, err := zw.Write(line); err != nil {
				return err
			}
			streams[e.Stream] = append(streams[e.Stream], e.Position)
			h.LastHash, h.LastTime = e.Hash, e.Time
			if pos == first {
				h.FirstTime = e.Time
			}
		}
		if err := zw.Close(); err != nil {
			return err
		}
		h.Bytes = cw.n
		return bw.Flush()
	})
	if err != nil {
		return nil, err
	}
	h.SHA256 = hex.EncodeToString(sum.Sum(nil))
	entries := make([]streamEntry, 0, len(streams))
	for s, p := range streams {
		entries = append(entries, streamEntry{Stream: s, Positions: p})
	}
	slices.SortFunc(entries, func(x, y streamEntry) int {
		switch {
		case x.Stream < y.Stream:
			return -1
		case x.Stream > y.Stream:
			return 1
		}
		return 0
	})
	h.Streams = len(entries)
	h.Filter = newFilter(len(entries))
	for _, e := range entries {
		filterAdd(h.Filter, h.FilterK, e.Stream)
	}
	if err := a.writeFile(indexFile(first, last), func(w io.Writer) error { return writeIndex(w, &h, entries) }); err != nil {
		return nil, err
	}
	// (Nothing goes into the look-up cache: a process that archives but
	// never reads the archive keeps its heap flat; the first read fills it.)
	return &segment{
		Segment: Segment{Name: name, First: first, Last: last, Count: h.Count, Bytes: h.Bytes, PrevHash: prev, LastHash: h.LastHash,
			FirstTime: h.FirstTime, LastTime: h.LastTime},
		filterK: h.FilterK,
		checked: true, // written from a log whose chain it checked
	}, nil
}

// removeTemps removes the temporary files of writes a crash interrupted
// (the writer is alone: it holds the executor's lease).
func (a *Archive) removeTemps() {
	names, _ := a.fs.ReadDir(a.dir)
	for _, n := range names {
		if strings.HasPrefix(n, ".segment-") && strings.HasSuffix(n, ".tmp") {
			_ = a.fs.Remove(filepath.Join(a.dir, n))
		}
	}
}

// writeFile writes dir/name crash-safely: a temporary file, fsync, rename,
// fsync of the directory. The file is the owner's alone (diskfs.FileMode).
func (a *Archive) writeFile(name string, fill func(io.Writer) error) (err error) {
	tmp := filepath.Join(a.dir, "."+name+".tmp")
	f, err := a.fs.Create(tmp)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			_ = a.fs.Remove(tmp)
		}
	}()
	if err = fill(f); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = a.fs.Rename(tmp, filepath.Join(a.dir, name)); err != nil {
		return err
	}
	return a.fs.SyncDir(a.dir)
}
