package embedded

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/diskfs"
)

// scanChunk is the size of the reads recovery makes.
const scanChunk = 4 << 20

// inspectDir looks at dir without changing it. It reports whether dir holds a
// log, and fails with ErrNotOurs when dir holds files but no turnstile log
// (or a log with another header).
func inspectDir(fsys diskfs.FS, dir string) (hasLog bool, err error) {
	entries, err := fsys.ReadDir(dir)
	if diskfs.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("embedded: reading data directory: %w", err)
	}
	var hasIndex bool
	var foreign string
	firsts, tmps := segmentFiles(entries)
	for _, name := range entries {
		if _, ok := parseSegName(name); ok || slices.Contains(tmps, name) {
			continue
		}
		if _, _, ok := parseLevelName(strings.TrimSuffix(name, tmpSuffix)); ok {
			hasIndex = true
			continue
		}
		switch name {
		case sealedName, oldIndexName, startName:
			hasIndex = true
		case lockName, logName + tmpSuffix, sealedName + tmpSuffix, oldIndexName + tmpSuffix, startName + tmpSuffix:
		default:
			if foreign == "" {
				foreign = name
			}
		}
	}
	if len(firsts) == 0 {
		if foreign != "" {
			return false, fmt.Errorf("embedded: %s holds %q and no turnstile log: %w", dir, foreign, eventstore.ErrNotOurs)
		}
		if hasIndex {
			return false, fmt.Errorf("embedded: %s holds an index but its log is missing: %w", dir, eventstore.ErrCorrupt)
		}
		return false, nil
	}
	path := filepath.Join(dir, segName(firsts[0]))
	f, err := fsys.Open(path)
	if err != nil {
		return false, fmt.Errorf("embedded: opening log: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only: nothing to lose
	return true, checkHeader(f, path, true)
}

// checkHeader checks the header of the log file (segment) f at path:
// format 2, or with v1 also format 1 (a log that Open upgrades).
func checkHeader(f diskfs.File, path string, v1 bool) error {
	h := make([]byte, headerSize)
	if _, err := f.ReadAt(h, 0); err != nil || string(h[:8]) != logMagic || string(h[8:12]) != logKind {
		return fmt.Errorf("embedded: %s: not a turnstile log (bad header): %w", path, eventstore.ErrNotOurs)
	}
	if v := binary.LittleEndian.Uint32(h[12:]); v != formatVersion && (!v1 || v != formatVersionV1) {
		return fmt.Errorf("embedded: %s: log format version %d, this build reads versions %d and %d: %w", path, v, formatVersionV1, formatVersion, eventstore.ErrNotOurs)
	}
	return nil
}

// logFormat returns the format version in the header of dir's first
// segment, which inspectDir has accepted. A format-1 log is the single file
// "log" (segments came with format 2).
func logFormat(fsys diskfs.FS, dir string) (uint32, error) {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("embedded: reading data directory: %w", err)
	}
	firsts, _ := segmentFiles(names)
	if len(firsts) == 0 {
		return 0, fmt.Errorf("embedded: %s holds no log: %w", dir, eventstore.ErrCorrupt)
	}
	f, err := fsys.Open(filepath.Join(dir, segName(firsts[0])))
	if err != nil {
		return 0, fmt.Errorf("embedded: opening log: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only: nothing to lose
	h := make([]byte, headerSize)
	if _, err := f.ReadAt(h, 0); err != nil {
		return 0, fmt.Errorf("embedded: reading the log's header: %w", err)
	}
	return binary.LittleEndian.Uint32(h[12:]), nil
}

// initLog creates an empty log atomically: header to a temporary file, fsync,
// rename, fsync the directory.
func (s *Store) initLog() error {
	tmp := filepath.Join(s.dir, logName+tmpSuffix)
	err := writeFileSync(s.fs, tmp, logHeader(), !s.opts.NoSync)
	if err == nil {
		err = s.fs.Rename(tmp, filepath.Join(s.dir, logName))
	}
	if err == nil {
		err = s.syncDir()
	}
	if err != nil {
		return fmt.Errorf("embedded: creating log: %w", err)
	}
	return nil
}

func writeFileSync(fsys diskfs.FS, path string, data []byte, doSync bool) error {
	f, err := fsys.Create(path)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && doSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// recover rebuilds the indexes: the sealed part from the sealed file, if it
// is intact and agrees with the log (every record it covers is checked
// unless TrustIndex), then the hot part by scanning the rest of the log. A
// torn or incomplete last write is cut off the file.
func (s *Store) recover() error {
	size, err := s.f.Size()
	if err != nil {
		return fmt.Errorf("embedded: opening log: %w", err)
	}
	s.resetIndexes()
	start := s.start.off
	x, err := s.loadLevels(size)
	if err != nil {
		return err
	}
	if x.events() > 0 {
		s.sealed, s.base, start = x, x.n, x.end
		s.loadedSealed = x.events()
	}
	cut, err := s.scan(start, size)
	if err != nil {
		return err
	}
	if cut < s.f.last().base {
		return corruptError(filepath.Base(s.f.last().path), headerSize, fmt.Sprintf("the log before this segment ends early, at logical offset %d", cut))
	}
	s.scanNew = nil
	s.end, s.wend, s.alloc = cut, cut, size
	s.next = s.base + uint64(len(s.offsets))
	s.head.Store(s.next)
	for _, st := range s.streams {
		st.committed = len(st.positions)
	}
	if cut < size {
		if err := s.cutTail(cut, size); err != nil {
			return err
		}
	}
	s.log.Info("log recovered", "start", s.start.first, "head", s.next, "sealed", s.base, "segments", len(s.f.list()), "scanned_from_offset", start, "end", cut)
	return nil
}

// checkSealed checks a loaded level file against the log, after the
// levels before it: its last event must be in the log where it says and,
// unless TrustIndex, every record it covers must be sound (or the log is
// corrupt: an error wrapping ErrCorrupt) and be what the file lists (or
// the file is unusable: false, logged, as when the file cannot be read).
// Only a failure to read the log is an error otherwise.
func (s *Store) checkSealed(sl *sealed) (bool, error) {
	unusable := func(format string, args ...any) (bool, error) {
		s.log.Warn("ignoring the sealed index; scanning the whole log",
			"err", fmt.Errorf("%w: "+format, append([]any{errBadSealed}, args...)...))
		return false, nil
	}
	var two [2]int64
	var buf [16]byte
	if err := sl.offsets(sl.n-1, two[:], buf[:]); err != nil {
		return unusable("reading it: %v", err)
	}
	w := window{f: s.f, size: sl.end}
	var r rec
	l, st, err := w.record(two[0], &r)
	if err != nil {
		return false, err
	}
	last := sl.n - 1
	if st != recOK || two[0]+int64(l) != sl.end || r.position != last || r.flags&flagCommit == 0 {
		return unusable("the log does not hold the last event it lists at offset %d", two[0])
	}
	pos, ok, err := sl.findID(r.id)
	if err != nil {
		return unusable("reading it: %v", err)
	}
	ss, found, err := sl.findStream(string(r.stream))
	if err != nil {
		return unusable("reading it: %v", err)
	}
	if !ok || pos != last || !found || ss.base+ss.count != r.version+1 {
		return unusable("the last event it lists does not match the log at offset %d", two[0])
	}
	if s.opts.TrustIndex {
		s.last = r.hash // the chain before the hot part, trusted like the rest
		return true, nil
	}
	// Every record: its place, its checksum, and the sums of what it holds.
	offs := bufio.NewReaderSize(io.NewSectionReader(sl.f, sealedHeaderSize, 8*int64(sl.events())), 256<<10)
	var got sums
	prev := s.last // the chain hash before the level's first event
	off := sl.firstOff
	segs := newSegCheck(s.f, off)
	for p := sl.first; p < sl.n; p++ {
		if _, err := io.ReadFull(offs, buf[:8]); err != nil {
			return unusable("reading it: %v", err)
		}
		if listed := int64(binary.LittleEndian.Uint64(buf[:8])); listed != off {
			return unusable("position %d is listed at offset %d, the log has it at %d", p, listed, off)
		}
		l, st, err := w.record(off, &r)
		if err != nil {
			return false, err
		}
		if st != recOK {
			return false, corruptError(logName, off, fmt.Sprintf("%v in the record of position %d", st, p))
		}
		if r.position != p {
			return unusable("the record at offset %d holds position %d, not %d", off, r.position, p)
		}
		if err := segs.at(off, p); err != nil {
			return false, err
		}
		if prev, err = checkChain(&s.chain, prev, &r, off); err != nil {
			return false, err
		}
		got.addID(r.id, p)
		got.addVersion(hashNameB(r.stream), r.version, p)
		off += int64(l)
	}
	if off != sl.end {
		return unusable("its records end at offset %d, not %d", off, sl.end)
	}
	want, err := sl.fileSums()
	if err != nil {
		return unusable("reading it: %v", err)
	}
	if got != want {
		return unusable("the ids, streams or versions it lists are not those of the log")
	}
	s.last = prev
	return true, nil
}

// cutTail removes what lies past the last complete write, unless it is only
// the zeros of preallocation, which are kept for the next writes.
func (s *Store) cutTail(cut, size int64) error {
	zero, err := s.allZero(cut, size)
	if err != nil {
		return err
	}
	if zero {
		return nil
	}
	s.log.Warn("cutting a torn write off the end of the log (never acknowledged: an append returns only once its write is complete and synced); the next append takes its position",
		"offset", cut, "bytes", size-cut, "position", s.next)
	if err := s.f.Truncate(cut); err != nil {
		return fmt.Errorf("embedded: cutting the torn end of the log at offset %d: %w", cut, err)
	}
	if err := s.syncAll(); err != nil {
		return fmt.Errorf("embedded: cutting the torn end of the log: %w", err)
	}
	s.alloc = cut
	return nil
}

func (s *Store) allZero(from, to int64) (bool, error) {
	w := window{f: s.f, size: to}
	for off := from; off < to; {
		b, err := w.at(off, 1)
		if err != nil {
			return false, err
		}
		for _, c := range b {
			if c != 0 {
				return false, nil
			}
		}
		off += int64(len(b))
	}
	return true, nil
}

// resetIndexes empties the indexes, for a scan from the start.
func (s *Store) resetIndexes() {
	s.offsets, s.posStream, s.posID = nil, nil, nil
	s.streams = make(map[string]*stream)
	s.ids = newIDIndex(0)
	s.sealed, s.base = newIndex(s.start.first, s.start.off, nil), s.start.first
	s.last = s.start.prev
}

// window reads a file sequentially in big chunks.
type window struct {
	v1      bool   // the file is a format-1 log (records without a hash)
	scratch []byte // format 1: the last record's body, widened to format 2
	f       io.ReaderAt
	size    int64 // bytes of the file to consider
	buf     []byte
	base    int64
	n       int
}

// at returns the file's bytes from off on: at least want of them unless the
// file ends first. They are valid until the next call.
func (w *window) at(off int64, want int) ([]byte, error) {
	if off >= w.base && off+int64(want) <= w.base+int64(w.n) {
		return w.buf[off-w.base : w.n], nil
	}
	if len(w.buf) < want || len(w.buf) < scanChunk && int64(len(w.buf)) < w.size-off {
		w.buf = make([]byte, max(want, int(min(scanChunk, w.size-off))))
	}
	n := min(int64(len(w.buf)), w.size-off)
	if n <= 0 {
		w.base, w.n = off, 0
		return nil, nil
	}
	if _, err := w.f.ReadAt(w.buf[:n], off); err != nil {
		return nil, fmt.Errorf("embedded: reading the log at offset %d: %w", off, err)
	}
	w.base, w.n = off, int(n)
	return w.buf[:n], nil
}

// next reads the record at off: its size and status.
func (w *window) record(off int64, r *rec) (int, recordStatus, error) {
	b, err := w.at(off, minRecord)
	if err != nil {
		return 0, 0, err
	}
	parse := parseRecord
	if w.v1 {
		parse = func(b []byte, r *rec) (int, recordStatus) { return parseRecordV1(b, r, &w.scratch) }
	}
	n, st := recordLen(b, w.v1)
	if st == recShort && n > len(b) && off+int64(n) <= w.size {
		if b, err = w.at(off, n); err != nil {
			return 0, 0, err
		}
	}
	n, st = parse(b, r)
	return n, st, nil
}

// scan reads records from start (where position len(s.offsets) begins) to
// size, adding them to the indexes, and returns the offset just past the last
// complete write. Records of an incomplete commit (an append whose last
// record is missing) are taken back out. A bad record ends the scan if no
// later write follows it; if one does, the log is corrupt.
func (s *Store) scan(start, size int64) (int64, error) {
	w := window{f: s.f, size: size}
	var r rec
	off := start
	cut := start
	mark := s.mark()
	segs := newSegCheck(s.f, start)
	for off < size {
		n, st, err := w.record(off, &r)
		if err != nil {
			return 0, err
		}
		if st != recOK {
			if err := s.checkTorn(&w, off, st); err != nil {
				return 0, err
			}
			break
		}
		if err := s.addScanned(&r, off); err != nil {
			return 0, err
		}
		if err := segs.at(off, r.position); err != nil {
			return 0, err
		}
		off += int64(n)
		if r.flags&flagCommit != 0 {
			cut = off
			mark = s.mark()
		}
	}
	s.rollback(mark)
	if err := segs.end(cut, s.base+uint64(len(s.offsets))); err != nil {
		return 0, err
	}
	return cut, nil
}

// addScanned adds a checked record to the hot indexes, after checking that
// it continues the log: the next position, the chain hash that follows the
// record before it, the next version of its stream,
// an id not seen before (in the hot or the sealed part).
func (s *Store) addScanned(r *rec, off int64) error {
	pos := s.base + uint64(len(s.offsets))
	if r.position != pos {
		return corruptError(logName, off, fmt.Sprintf("position %d: the record there holds position %d (an event is missing or out of order)", pos, r.position))
	}
	var err error
	if s.last, err = checkChain(&s.chain, s.last, r, off); err != nil {
		return err
	}
	st := s.streams[string(r.stream)]
	if st == nil {
		if err := eventstore.ValidateStream(string(r.stream)); err != nil {
			return corruptError(logName, off, err.Error())
		}
		n, ok, err := s.sealed.count(string(r.stream))
		if err != nil {
			return err
		}
		if !ok {
			n = s.start.kept[string(r.stream)]
		}
		st = &stream{name: string(r.stream), sealed: n}
		s.streams[st.name] = st
		s.scanNew = append(s.scanNew, st)
	}
	if want := st.sealed + uint64(len(st.positions)); r.version != want {
		return corruptError(logName, off, fmt.Sprintf("position %d: the record holds version %d of %q where %d was expected", pos, r.version, st.name, want))
	}
	_, dup, err := s.findID(r.id)
	if err != nil {
		return err
	}
	if dup {
		return corruptError(logName, off, fmt.Sprintf("event id %s is stored twice", r.id))
	}
	s.offsets = append(s.offsets, off)
	s.posStream = append(s.posStream, st)
	s.posID = append(s.posID, r.id)
	st.positions = append(st.positions, pos)
	s.ids.put(pos-s.base, s.posID)
	return nil
}

// scanMark is the size of the indexes (and the chain's last hash) at the
// end of a complete commit.
type scanMark struct {
	events, streams int
	last            domain.Hash
}

func (s *Store) mark() scanMark { return scanMark{len(s.offsets), len(s.scanNew), s.last} }

// rollback takes the records added since m back out of the indexes.
func (s *Store) rollback(m scanMark) {
	for i := len(s.offsets) - 1; i >= m.events; i-- {
		st := s.posStream[i]
		st.positions = st.positions[:len(st.positions)-1]
		s.ids.del(s.posID[i], s.posID)
	}
	for _, st := range s.scanNew[m.streams:] {
		delete(s.streams, st.name)
	}
	clear(s.recent[:])
	clear(s.scanNew[m.streams:])
	clear(s.posStream[m.events:])
	s.offsets, s.posStream, s.posID = s.offsets[:m.events], s.posStream[:m.events], s.posID[:m.events]
	s.scanNew = s.scanNew[:m.streams]
	s.last = m.last
}

// checkTorn decides what the bad record at off means. The committer writes
// and syncs one group commit at a time, so a crash can only tear the last
// write; a record of a later write past off proves the damage is not a torn
// write but corruption of acknowledged data. Records of the same write as
// off may survive a tear (the disk need not persist a write's pages in
// order), so they do not count.
func (s *Store) checkTorn(w *window, off int64, st recordStatus) error {
	return checkTornAt(w, off, st, s.base+uint64(len(s.offsets)))
}

// checkTornAt is checkTorn for the bad record at off that should hold
// position pos.
func checkTornAt(w *window, off int64, st recordStatus, pos uint64) error {
	lo, hi := bodyBounds(w.v1)
	maxPos := pos + uint64((w.size-off)/minRecord) + 1
	var r rec
	minRec := prefixSize + int(lo)
	for o := off + 1; o+int64(minRec) <= w.size; {
		b, err := w.at(o, minRec)
		if err != nil {
			return err
		}
		// Look for a plausible record start in what the window holds.
		i := 0
		for ; i+minRec <= len(b); i++ {
			l := binary.LittleEndian.Uint32(b[i:])
			if l < lo || l > hi || o+int64(i)+prefixSize+int64(l) > w.size {
				continue
			}
			if p := binary.LittleEndian.Uint64(b[i+prefixSize:]); p >= pos && p <= maxPos {
				break
			}
		}
		if i+minRec > len(b) {
			o += int64(max(i, 1))
			continue
		}
		o += int64(i)
		n, rst, err := w.record(o, &r)
		if err != nil {
			return err
		}
		if rst != recOK {
			o++
			continue
		}
		if r.position-uint64(r.inWrite) > pos {
			return corruptError(logName, off, fmt.Sprintf("%v in the record of position %d, and a later write starts at offset %d (position %d)",
				st, pos, o, r.position-uint64(r.inWrite)))
		}
		o += int64(n)
	}
	return nil
}
