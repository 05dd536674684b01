package embedded

// The log as segment files. The store addresses its records by a logical
// offset: the byte stream of every segment's records, back to back, headers
// left out, so that a segment's first record starts where the one before it
// ended. The first segment ever (position 0) is the file "log", and its
// logical offsets are its file offsets; a segment that starts at position p
// is the file "log-<p, 20 digits>". Everything above this layer (the sealed
// file's record offsets, the hot part's, recovery's scan) sees one file; only
// segLog knows which file holds an offset.
//
// Order of the writes that keep this true across a crash: a segment is
// started (roll) only between two group commits, after the current one is
// cut to its last record and synced (fsync), and the new file is created with
// its header in a temporary file, synced and renamed, then the directory is
// synced. So every segment but the last is complete, only the last one can
// end in a torn write or preallocated zeros, and the logical base of each
// segment is the logical end of the one before.

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/turnstile/turnstile/eventstore/diskfs"
)

const (
	segPrefix = logName + "-"
	segDigits = 20
)

// segName is the file name of the segment whose first position is first.
func segName(first uint64) string {
	if first == 0 {
		return logName
	}
	return fmt.Sprintf("%s%0*d", segPrefix, segDigits, first)
}

// parseSegName returns the first position of the segment file name, if
// name is one.
func parseSegName(name string) (uint64, bool) {
	if name == logName {
		return 0, true
	}
	digits, ok := strings.CutPrefix(name, segPrefix)
	if !ok || len(digits) != segDigits {
		return 0, false
	}
	p, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || p == 0 {
		return 0, false
	}
	return p, true
}

// segment is one file of the log.
type segment struct {
	first uint64 // position of its first record (from its name)
	path  string
	f     diskfs.File
	base  int64 // logical offset of its first record (file offset headerSize)
	// gone is set when a trim has removed the segment: its file is closed,
	// and a read that meets it is a read below the live log's start.
	gone atomic.Bool
}

// errSegmentGone says a read met a segment that a trim removed.
var errSegmentGone = errors.New("embedded: segment trimmed from the live log")

// segLog is the log's segments seen as one file of logical offsets (it
// implements file). Reads may touch any segment; writes, truncates and syncs
// go to the last one. The list is replaced whole (copy on write) by a roll
// (committer) or a trim, so a reader never needs a lock.
type segLog struct {
	segs atomic.Pointer[[]*segment]
	mu   sync.Mutex // serialises changes to the list (a roll and a trim)
}

var _ diskfs.File = (*segLog)(nil)

func newSegLog(segs []*segment) *segLog {
	l := &segLog{}
	l.segs.Store(&segs)
	return l
}

func (l *segLog) list() []*segment { return *l.segs.Load() }

func (l *segLog) last() *segment {
	segs := l.list()
	return segs[len(segs)-1]
}

// push adds a new last segment.
func (l *segLog) push(sg *segment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.list()
	segs := append(old[:len(old):len(old)], sg)
	l.segs.Store(&segs)
}

// dropBefore removes the segments that start below position p from the
// list (never the last one) and returns them.
func (l *segLog) dropBefore(p uint64) []*segment {
	l.mu.Lock()
	defer l.mu.Unlock()
	segs := l.list()
	k := 0
	for k+1 < len(segs) && segs[k].first < p {
		k++
	}
	if k == 0 {
		return nil
	}
	rest := append([]*segment(nil), segs[k:]...)
	l.segs.Store(&rest)
	return segs[:k]
}

// holding returns the segment that holds position p: the last one that
// starts at or below it.
func (l *segLog) holding(p uint64) *segment {
	segs := l.list()
	i := sort.Search(len(segs), func(i int) bool { return segs[i].first > p }) - 1
	return segs[max(i, 0)]
}

func (l *segLog) ReadAt(b []byte, off int64) (int, error) {
	segs := l.list()
	n := 0
	for n < len(b) {
		i := sort.Search(len(segs), func(i int) bool { return segs[i].base > off }) - 1
		if i < 0 {
			return n, errSegmentGone
		}
		sg := segs[i]
		chunk := b[n:]
		if i+1 < len(segs) {
			if room := segs[i+1].base - off; int64(len(chunk)) > room {
				chunk = chunk[:room]
			}
		}
		if sg.gone.Load() {
			return n, errSegmentGone
		}
		k, err := sg.f.ReadAt(chunk, off-sg.base+headerSize)
		n += k
		off += int64(k)
		if err != nil {
			if sg.gone.Load() {
				err = errSegmentGone
			}
			return n, err
		}
	}
	return n, nil
}

func (l *segLog) WriteAt(b []byte, off int64) (int, error) {
	sg := l.last()
	if off < sg.base {
		return 0, fmt.Errorf("embedded: write at offset %d below the last segment (from %d)", off, sg.base)
	}
	return sg.f.WriteAt(b, off-sg.base+headerSize)
}

func (l *segLog) Write([]byte) (int, error) {
	return 0, errors.New("embedded: the log is written at offsets")
}

// Size is the logical offset just past the last segment's bytes.
func (l *segLog) Size() (int64, error) {
	sg := l.last()
	n, err := sg.f.Size()
	if err != nil {
		return 0, err
	}
	return sg.base + n - headerSize, nil
}

func (l *segLog) Truncate(size int64) error {
	sg := l.last()
	if size < sg.base {
		return fmt.Errorf("embedded: truncating the log to offset %d, below its last segment (from %d): %w", size, sg.base, io.ErrUnexpectedEOF)
	}
	return sg.f.Truncate(size - sg.base + headerSize)
}

func (l *segLog) Sync() error            { return l.last().f.Sync() }
func (l *segLog) Datasync() error        { return l.last().f.Datasync() }
func (l *segLog) Writeback(off, n int64) { sg := l.last(); sg.f.Writeback(off-sg.base+headerSize, n) }

// Close closes every segment's file.
func (l *segLog) Close() error {
	var errs []error
	for _, sg := range l.list() {
		if !sg.gone.Load() {
			if err := sg.f.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// segmentFiles returns the segment files in dir by first position, and the
// temporary files of segments being created.
func segmentFiles(names []string) (firsts []uint64, tmps []string) {
	for _, name := range names {
		if p, ok := parseSegName(name); ok {
			firsts = append(firsts, p)
		} else if base, ok := strings.CutSuffix(name, tmpSuffix); ok {
			if _, ok := parseSegName(base); ok {
				tmps = append(tmps, name)
			}
		}
	}
	sort.Slice(firsts, func(i, j int) bool { return firsts[i] < firsts[j] })
	return firsts, tmps
}

// openSegments opens the log's segments from the one that holds the live
// log's start on (st), removing what a crash left behind: temporary segment
// files, and segments wholly below the start that a trim had not removed
// yet. Every segment's header is checked, and each one's logical base is the
// end of the one before.
func (s *Store) openSegments(st *startState) (*segLog, error) {
	names, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("embedded: reading data directory: %w", err)
	}
	firsts, tmps := segmentFiles(names)
	removed := false
	for _, name := range tmps {
		if err := s.fs.Remove(filepath.Join(s.dir, name)); err != nil {
			return nil, fmt.Errorf("embedded: removing %s: %w", name, err)
		}
		removed = true
	}
	for len(firsts) > 0 && firsts[0] < st.segFirst {
		name := segName(firsts[0])
		s.log.Info("removing a segment below the live log's start (a trim was cut short)", "file", name, "start", st.first)
		if err := s.fs.Remove(filepath.Join(s.dir, name)); err != nil {
			return nil, fmt.Errorf("embedded: removing %s: %w", name, err)
		}
		removed = true
		firsts = firsts[1:]
	}
	if removed {
		if err := s.syncDir(); err != nil {
			return nil, fmt.Errorf("embedded: removing leftover files: %w", err)
		}
	}
	if len(firsts) == 0 || firsts[0] != st.segFirst {
		return nil, corruptError(segName(st.segFirst), 0, fmt.Sprintf("the segment that holds the live log's start (position %d) is missing", st.first))
	}
	segs := make([]*segment, 0, len(firsts))
	fail := func(err error) (*segLog, error) {
		for _, sg := range segs {
			_ = sg.f.Close() // the open failed: its error is the one to report
		}
		return nil, err
	}
	base := st.segBase
	for i, first := range firsts {
		path := filepath.Join(s.dir, segName(first))
		var f diskfs.File
		if i == len(firsts)-1 {
			f, err = s.fs.OpenRW(path)
		} else {
			f, err = s.fs.Open(path)
		}
		if err != nil {
			return fail(fmt.Errorf("embedded: opening %s: %w", path, err))
		}
		segs = append(segs, &segment{first: first, path: path, f: f, base: base})
		if err := checkHeader(f, path, false); err != nil {
			return fail(err)
		}
		size, err := f.Size()
		if err != nil {
			return fail(fmt.Errorf("embedded: opening %s: %w", path, err))
		}
		base += size - headerSize
	}
	return newSegLog(segs), nil
}

// segCheck checks, as recovery meets records in order, that each segment
// starts with the position its name says.
type segCheck struct {
	segs []*segment
	i    int // the next segment boundary to meet
}

func newSegCheck(l *segLog, from int64) *segCheck {
	c := &segCheck{segs: l.list()}
	for c.i < len(c.segs) && c.segs[c.i].base < from {
		c.i++
	}
	return c
}

// at is called for the record of position pos at logical offset off.
func (c *segCheck) at(off int64, pos uint64) error {
	for c.i < len(c.segs) && c.segs[c.i].base <= off {
		sg := c.segs[c.i]
		c.i++
		if sg.base == off && sg.first != pos {
			return corruptError(filepath.Base(sg.path), headerSize, fmt.Sprintf("the segment's first record holds position %d, its name says %d", pos, sg.first))
		}
	}
	return nil
}

// end is called with the position that follows the last record: a segment
// that starts at or past the end of the records (an empty last segment) must
// start at that position.
func (c *segCheck) end(off int64, next uint64) error {
	for ; c.i < len(c.segs); c.i++ {
		sg := c.segs[c.i]
		if sg.base > off || sg.first != next {
			return corruptError(filepath.Base(sg.path), headerSize, fmt.Sprintf("the segment starts at position %d, but the log before it ends at %d", sg.first, next))
		}
	}
	return nil
}

// needRoll reports whether the last segment has reached
// Options.SegmentBytes and holds a record: the next chunk then starts a
// new segment. Committer only.
func (s *Store) needRoll() bool {
	sg := s.f.last()
	return s.wend > sg.base && s.wend-sg.base+headerSize >= s.opts.SegmentBytes
}

// roll starts a new segment at position s.next: it cuts the current one to
// its last record (giving back preallocated zeros) and syncs it, then
// creates the new file atomically. Committer only, between chunks, when
// everything staged is written.
func (s *Store) roll() error {
	l := s.f
	if s.alloc > s.wend {
		if err := l.Truncate(s.wend); err != nil {
			return fmt.Errorf("cutting the segment to its last record: %w", err)
		}
		s.alloc = s.wend
	}
	if err := s.syncAll(); err != nil {
		return fmt.Errorf("syncing the full segment: %w", err)
	}
	name := segName(s.next)
	path := filepath.Join(s.dir, name)
	if err := writeFileSync(s.fs, path+tmpSuffix, logHeader(), !s.opts.NoSync); err != nil {
		return fmt.Errorf("creating %s: %w", name, err)
	}
	if err := s.fs.Rename(path+tmpSuffix, path); err != nil {
		return fmt.Errorf("creating %s: %w", name, err)
	}
	if err := s.syncDir(); err != nil {
		return fmt.Errorf("creating %s: %w", name, err)
	}
	f, err := s.fs.OpenRW(path)
	if err != nil {
		return fmt.Errorf("opening %s: %w", name, err)
	}
	l.push(&segment{first: s.next, path: path, f: f, base: s.wend})
	s.alloc = s.wend
	s.rolls.Add(1)
	return nil
}
