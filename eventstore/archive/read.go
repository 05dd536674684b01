package archive

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/diskfs"
)

// maxLine bounds a segment line: an event's data and metadata (at most
// eventstore.MaxEventSize together) in base64 beside their compacted JSON.
const maxLine = 8 << 20

// cursor reads one segment's lines from some position on.
type cursor struct {
	seg  *segment
	f    diskfs.File
	zr   *gzip.Reader
	sc   *bufio.Scanner
	next uint64 // the position of the next line
}

func (c *cursor) close() {
	if c != nil && c.f != nil {
		c.f.Close()
	}
}

// openCursor opens s at the gzip member holding pos and skips to pos.
func (a *Archive) openCursor(s *segment, pos uint64) (*cursor, error) {
	l, err := a.lookup(s)
	if err != nil {
		return nil, err
	}
	f, err := a.fs.Open(filepath.Join(a.dir, s.Name))
	if err != nil {
		return nil, err
	}
	size, err := f.Size()
	if err != nil {
		f.Close()
		return nil, err
	}
	var off int64
	next := s.First
	i, found := slices.BinarySearchFunc(l.blocks, pos, func(b block, p uint64) int { return cmpU(b.First, p) })
	if !found {
		i--
	}
	if i >= 0 && i < len(l.blocks) {
		off, next = l.blocks[i].Offset, l.blocks[i].First
	}
	zr, err := gzip.NewReader(bufio.NewReaderSize(io.NewSectionReader(f, off, max(size-off, 0)), 64<<10))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %s at byte %d: %v", ErrArchive, s.Name, off, err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	c := &cursor{seg: s, f: f, zr: zr, sc: sc, next: next}
	for c.next < pos {
		if !sc.Scan() {
			c.close()
			return nil, c.failed(sc.Err())
		}
		c.next++
	}
	return c, nil
}

func (c *cursor) failed(err error) error {
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w: %s: reading position %d: %v", ErrArchive, c.seg.Name, c.next, err)
}

// read decodes the next event.
func (c *cursor) read() (domain.Envelope, error) {
	if !c.sc.Scan() {
		return domain.Envelope{}, c.failed(c.sc.Err())
	}
	e, err := decodeLine(c.sc.Bytes())
	if err != nil {
		return e, c.failed(err)
	}
	if e.Position != c.next {
		return e, c.failed(fmt.Errorf("found position %d", e.Position))
	}
	c.next++
	return e, nil
}

// take returns a cursor at pos: the cached one if it is there, else a new one.
func (a *Archive) take(s *segment, pos uint64) (*cursor, error) {
	a.mu.Lock()
	c := a.cur
	if c != nil && c.seg == s && c.next == pos {
		a.cur = nil
		a.mu.Unlock()
		return c, nil
	}
	a.mu.Unlock()
	return a.openCursor(s, pos)
}

// keep caches c for the next read.
func (a *Archive) keep(c *cursor) {
	a.mu.Lock()
	old := a.cur
	a.cur = c
	a.mu.Unlock()
	if old != c {
		old.close()
	}
}

// Close releases the files the archive holds open.
func (a *Archive) Close() error {
	a.mu.Lock()
	c := a.cur
	a.cur = nil
	a.mu.Unlock()
	c.close()
	return nil
}

// Read returns up to limit archived events from position from (inclusive)
// in position order, crossing segments; nothing when from is outside
// [First, End). It serves nothing from a segment that does not verify (see
// verified: the first read of a segment reads it whole once).
func (a *Archive) Read(ctx context.Context, from uint64, limit int) ([]domain.Envelope, error) {
	return a.read(ctx, from, limit, true)
}

// read is Read; with check false it does not verify the segments it reads
// (for a reader that checks the chain itself).
func (a *Archive) read(ctx context.Context, from uint64, limit int, check bool) ([]domain.Envelope, error) {
	segs := a.snapshot()
	var out []domain.Envelope
	for len(out) < limit {
		s := find(segs, from)
		if s == nil {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if check {
			if err := a.verified(ctx, s); err != nil {
				return nil, err
			}
		}
		c, err := a.take(s, from)
		if err != nil {
			return nil, err
		}
		for len(out) < limit && c.next <= s.Last {
			e, err := c.read()
			if err != nil {
				c.close()
				return nil, err
			}
			out = append(out, e)
		}
		from = c.next
		if c.next <= s.Last {
			a.keep(c)
		} else {
			c.close()
		}
	}
	return out, nil
}

// ReadStream returns every archived event of stream, in version order
// (nil if the archive holds none). It reads the index of each segment whose
// stream filter matches, and the segments' gzip members that hold the
// stream's events; it serves nothing from a segment that does not verify
// (see verified: the first read of a segment reads it whole once).
func (a *Archive) ReadStream(ctx context.Context, stream string) ([]domain.Envelope, error) {
	return a.readStream(ctx, stream, true)
}

// readStream is ReadStream; with check false it does not verify the
// segments it reads.
func (a *Archive) readStream(ctx context.Context, stream string, check bool) ([]domain.Envelope, error) {
	var out []domain.Envelope
	for _, s := range a.snapshot() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		l, err := a.lookup(s)
		if err != nil {
			return nil, err
		}
		if !filterHas(l.filter, s.filterK, stream) {
			continue
		}
		positions, err := a.streamPositions(s, stream)
		if err != nil {
			return nil, err
		}
		if check && len(positions) > 0 {
			if err := a.verified(ctx, s); err != nil {
				return nil, err
			}
		}
		var c *cursor
		for _, p := range positions {
			if err := ctx.Err(); err != nil {
				c.close()
				return nil, err
			}
			if c == nil || c.next > p || p-c.next > blockEvents {
				c.close()
				if c, err = a.openCursor(s, p); err != nil {
					return nil, err
				}
			}
			for c.next < p {
				if !c.sc.Scan() {
					c.close()
					return nil, c.failed(c.sc.Err())
				}
				c.next++
			}
			e, err := c.read()
			if err != nil {
				c.close()
				return nil, err
			}
			if e.Stream != stream {
				c.close()
				return nil, fmt.Errorf("%w: %s: position %d is of stream %q, its index says %q", ErrArchive, s.Name, p, e.Stream, stream)
			}
			out = append(out, e)
		}
		c.close()
	}
	return out, nil
}

// FirstEvent returns the first event of stream (its version 0) if the
// archive holds it and the stream has an event in a segment whose log times
// reach since or later; found is false otherwise. It looks at the segments
// from the newest back, by their stream filters, and stops at the first
// segment that ended before since, unless the stream was found in a later
// one: then it goes on back to the stream's start, however old. So its cost
// is that of the segments since since (plus, for a stream found, those back
// to its start), not of the whole archive. A segment that does not record
// its log times (written before they were) counts as reaching since. It
// serves nothing from a segment that does not verify (see verified).
func (a *Archive) FirstEvent(ctx context.Context, stream string, since time.Time) (_ *domain.Envelope, found bool, err error) {
	segs := a.snapshot()
	var at *segment // the oldest segment seen holding the stream
	var pos uint64
	for i := len(segs) - 1; i >= 0; i-- {
		s := segs[i]
		if at == nil && !s.LastTime.IsZero() && s.LastTime.Before(since) {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		l, err := a.lookup(s)
		if err != nil {
			return nil, false, err
		}
		if !filterHas(l.filter, s.filterK, stream) {
			continue
		}
		ps, err := a.streamPositions(s, stream)
		if err != nil {
			return nil, false, err
		}
		if len(ps) == 0 {
			continue
		}
		if err := a.verified(ctx, s); err != nil {
			return nil, false, err
		}
		at, pos = s, ps[0]
		e, err := a.eventAt(s, pos)
		if err != nil {
			return nil, false, err
		}
		if e.Stream != stream {
			return nil, false, fmt.Errorf("%w: %s: position %d is of stream %q, its index says %q", ErrArchive, s.Name, pos, e.Stream, stream)
		}
		if e.Version == 0 {
			return &e, true, nil
		}
	}
	if at != nil {
		return nil, false, fmt.Errorf("%w: stream %q: the archive holds it from %d on but not its start", ErrArchive, stream, pos)
	}
	return nil, false, nil
}

// eventAt reads the event at pos of s.
func (a *Archive) eventAt(s *segment, pos uint64) (domain.Envelope, error) {
	c, err := a.openCursor(s, pos)
	if err != nil {
		return domain.Envelope{}, err
	}
	defer c.close()
	return c.read()
}

// streamPositions reads stream's positions in s from its index.
func (a *Archive) streamPositions(s *segment, stream string) ([]uint64, error) {
	var out []uint64
	err := readStreams(a.fs, filepath.Join(a.dir, indexFile(s.First, s.Last)), stream, func(e streamEntry) bool {
		if e.Stream == stream {
			out = e.Positions
		}
		return e.Stream < stream
	})
	return out, err
}
