package archive

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// ErrMismatch marks an archive that does not verify (inside a *Mismatch).
// It matches eventstore.ErrCorrupt.
var ErrMismatch = fmt.Errorf("archive does not verify: %w", eventstore.ErrCorrupt)

// Mismatch names the first position at which the archive does not verify.
type Mismatch struct {
	Position uint64 // the first position that does not match
	Segment  string // the segment file holding it
	Reason   string
}

func (m *Mismatch) Error() string {
	if m.Segment == "" {
		return fmt.Sprintf("position %d: %s: %v", m.Position, m.Reason, ErrMismatch)
	}
	return fmt.Sprintf("position %d (%s): %s: %v", m.Position, m.Segment, m.Reason, ErrMismatch)
}

// Unwrap lets errors.Is(err, ErrMismatch) match.
func (m *Mismatch) Unwrap() error { return ErrMismatch }

// Verified sums up an archive that verifies.
type Verified struct {
	Segments int
	Events   uint64
	Bytes    int64       // of the segment files
	First    uint64      // the first archived position
	End      uint64      // the position after the last
	EndHash  domain.Hash // the chain hash of the last archived event
}

// Verify checks every segment against its index and the hash chain: each
// line decodes, positions are dense from the index's first to its last,
// every event's hash is the chain hash of the event before it (across
// segments: a segment starts with the hash its predecessor ended with) and
// the event, the segment file has the SHA-256 and size its index records,
// and the index lists exactly the segment's streams and their positions. An
// archive that starts at position 0 starts after the zero hash. It returns
// a *Mismatch (matching ErrMismatch) naming the first position that does
// not verify, or another error if the archive cannot be read at all.
// progress, if not nil, is called with the position reached after each
// gzip member.
func (a *Archive) Verify(ctx context.Context, progress func(pos uint64)) (Verified, error) {
	segs := a.snapshot()
	v := Verified{Segments: len(segs)}
	if len(segs) == 0 {
		return v, nil
	}
	v.First, v.End = segs[0].First, endOf(segs)
	prev := segs[0].PrevHash
	if segs[0].First == 0 && !prev.IsZero() {
		return v, &Mismatch{Position: 0, Segment: segs[0].Name, Reason: "the archive starts at position 0, but its first index says the chain hash before it is " + prev.String() + ", not the zero hash"}
	}
	var chain eventstore.Chainer
	for _, s := range segs {
		if s.PrevHash != prev {
			return v, &Mismatch{Position: s.First, Segment: s.Name, Reason: fmt.Sprintf("the index says the chain hash before the segment is %s, the previous segment ends with %s", s.PrevHash, prev)}
		}
		last, n, err := a.verifySegment(ctx, s, prev, &chain, progress)
		s.settle(err)
		if err != nil {
			return v, err
		}
		prev = last
		v.Events += s.Count
		v.Bytes += n
	}
	v.EndHash = prev
	return v, nil
}

// verified returns nil once s verifies by itself (verifySegment, from the
// chain hash its index names before it, which Open checked against its
// predecessor's last): what a read serves from s is then the history the
// chain and the live log vouch for. It checks s once per Archive (a
// segment's files never change once written; Write's own segments count
// as checked) and remembers a segment that does not verify: every later
// read of it fails at once with the same *Mismatch (ErrMismatch, which
// matches eventstore.ErrCorrupt), naming the segment and the first bad
// position. Concurrent first reads of s wait for one check.
func (a *Archive) verified(ctx context.Context, s *segment) error {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	if !s.checked {
		var err error
		if s.First == 0 && !s.PrevHash.IsZero() {
			err = &Mismatch{Position: 0, Segment: s.Name, Reason: "the segment starts at position 0, but its index says the chain hash before it is " + s.PrevHash.String() + ", not the zero hash"}
		} else {
			var chain eventstore.Chainer
			_, _, err = a.verifySegment(ctx, s, s.PrevHash, &chain, nil)
		}
		if s.settleLocked(err); !s.checked {
			return err // it could not be read: checked again next time
		}
	}
	if s.bad != nil {
		return fmt.Errorf("archive: nothing is served from %s, it does not verify (turnstile verify --archive checks the whole archive): %w", s.Name, s.bad)
	}
	return nil
}

// settle records the outcome of s's verification, if it is one (nil or a
// *Mismatch; not a failure to read).
func (s *segment) settle(err error) {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	s.settleLocked(err)
}

func (s *segment) settleLocked(err error) {
	if m := (*Mismatch)(nil); err == nil || errors.As(err, &m) {
		s.checked, s.bad = true, err
	}
}

// verifySegment checks one segment; it returns the chain hash of its last
// event and the file's size.
func (a *Archive) verifySegment(ctx context.Context, s *segment, prev domain.Hash, chain *eventstore.Chainer, progress func(uint64)) (domain.Hash, int64, error) {
	bad := func(pos uint64, format string, args ...any) error {
		return &Mismatch{Position: pos, Segment: s.Name, Reason: fmt.Sprintf(format, args...)}
	}
	f, err := a.fs.Open(filepath.Join(a.dir, s.Name))
	if err != nil {
		return prev, 0, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return prev, 0, err
	}
	sum := sha256.New()
	cw := &countingWriter{w: sum}
	raw := bufio.NewReaderSize(io.TeeReader(io.NewSectionReader(f, 0, size), cw), 256<<10)
	streams := map[string][]uint64{}
	next := s.First
	var firstTime, lastTime time.Time
	zr, err := gzip.NewReader(raw)
	if err != nil {
		return prev, 0, bad(next, "the segment is not gzip: %v", err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		if next > s.Last {
			return prev, 0, bad(next, "the segment holds more events than its index's last position %d", s.Last)
		}
		e, err := decodeLine(sc.Bytes())
		if err != nil {
			return prev, 0, bad(next, "the line does not decode: %v", err)
		}
		if e.Position != next {
			return prev, 0, bad(next, "found position %d where %d was due", e.Position, next)
		}
		h := chain.Next(prev, &e)
		if h != e.Hash {
			return prev, 0, bad(next, "the event's hash is %s, but the hash before it and its content give %s", e.Hash, h)
		}
		prev = h
		streams[e.Stream] = append(streams[e.Stream], e.Position)
		if next == s.First {
			firstTime = e.Time
		}
		lastTime = e.Time
		next++
		if (next-s.First)%blockEvents == 0 {
			if err := ctx.Err(); err != nil {
				return prev, 0, err
			}
			if progress != nil {
				progress(next)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return prev, 0, bad(next, "reading the segment: %v", err)
	}
	if next <= s.Last {
		return prev, 0, bad(next, "the segment ends before position %d; its index says it holds up to %d", next, s.Last)
	}
	if _, err := io.Copy(io.Discard, raw); err != nil {
		return prev, 0, err
	}
	// The index's header as the file holds it now (not as Open read it,
	// nor the cache's, which look-ups fill).
	onDisk, err := readHeader(a.fs, filepath.Join(a.dir, indexFile(s.First, s.Last)))
	if err != nil {
		return prev, 0, bad(s.First, "reading the index: %v", err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != onDisk.SHA256 || cw.n != onDisk.Bytes || cw.n != s.Bytes {
		return prev, 0, bad(s.First, "the segment file (%d bytes, SHA-256 %s) is not the one its index records (%d bytes, %s)", cw.n, got, onDisk.Bytes, onDisk.SHA256)
	}
	if prev != s.LastHash || prev != onDisk.LastHash {
		return prev, 0, bad(s.Last, "the chain hash of the last event is %s, its index says %s", prev, onDisk.LastHash)
	}
	// Its log times, where it records them (look-ups by time skip segments by them).
	if !onDisk.FirstTime.IsZero() || !onDisk.LastTime.IsZero() {
		if !onDisk.FirstTime.Equal(firstTime) || !onDisk.LastTime.Equal(lastTime) {
			return prev, 0, bad(s.First, "the index says the segment's log times are %s to %s, its events %s to %s",
				onDisk.FirstTime.Format(time.RFC3339Nano), onDisk.LastTime.Format(time.RFC3339Nano), firstTime.Format(time.RFC3339Nano), lastTime.Format(time.RFC3339Nano))
		}
	}
	// The index's streams: exactly the segment's, and all in its filter.
	listed := 0
	var mismatch error
	err = readStreams(a.fs, filepath.Join(a.dir, indexFile(s.First, s.Last)), "", func(e streamEntry) bool {
		listed++
		got := streams[e.Stream]
		if !slices.Equal(got, e.Positions) {
			pos := s.First
			if len(e.Positions) > 0 {
				pos = e.Positions[0]
			}
			mismatch = bad(pos, "the index lists stream %q at %d positions, the segment holds it at %d", e.Stream, len(e.Positions), len(got))
			return false
		}
		if !filterHas(onDisk.Filter, onDisk.FilterK, e.Stream) {
			mismatch = bad(e.Positions[0], "the index's stream filter misses stream %q", e.Stream)
			return false
		}
		delete(streams, e.Stream)
		return true
	})
	if err != nil {
		return prev, 0, bad(s.First, "the index's streams do not read: %v", err)
	}
	if mismatch != nil {
		return prev, 0, mismatch
	}
	for _, b := range onDisk.StreamBlocks { // each lookup block starts where the header says
		var first string
		if err := readStreams(a.fs, filepath.Join(a.dir, indexFile(s.First, s.Last)), b.First, func(e streamEntry) bool { first = e.Stream; return false }); err != nil || first != b.First {
			return prev, 0, bad(s.First, "the index's streams block of %q does not start with it (%q, %v)", b.First, first, err)
		}
	}
	if len(streams) > 0 || listed != onDisk.Streams {
		for name, p := range streams {
			return prev, 0, bad(p[0], "the index does not list stream %q", name)
		}
		return prev, 0, bad(s.First, "the index counts %d streams and lists %d", onDisk.Streams, listed)
	}
	return prev, cw.n, nil
}
