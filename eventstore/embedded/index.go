package embedded

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/eventstore"
)

// Index file layout. See doc.go.
const (
	indexMagic      = "TRNSTIDX"
	indexHeaderSize = 40
	indexTrailer    = 4
)

// checkpointLoop writes the index in the background when the committer asks.
func (s *Store) checkpointLoop() {
	defer close(s.ckptDone)
	for {
		select {
		case <-s.ckptStop:
			return
		case <-s.ckptWake:
			if err := s.checkpoint(); err != nil {
				s.log.Warn("writing the index checkpoint failed", "err", err)
			}
		}
	}
}

// maybeCheckpoint asks for a checkpoint when enough events were committed
// since the last one: CheckpointEvery, or a quarter of the log if more.
func (s *Store) maybeCheckpoint() {
	if s.opts.CheckpointEvery < 0 {
		return
	}
	h, c := s.head.Load(), s.ckptCount.Load()
	if h-c >= max(uint64(s.opts.CheckpointEvery), c/4) {
		select {
		case s.ckptWake <- struct{}{}:
		default:
		}
	}
}

// checkpoint writes an index of the committed log, unless the index on disk
// already covers it. It may run while appends go on.
func (s *Store) checkpoint() error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	v := s.view()
	s.mu.RLock()
	ids := s.posID[:v.head] // posID only grows
	s.mu.RUnlock()
	if v.head == s.ckptCount.Load() {
		return nil
	}
	tmp := filepath.Join(s.dir, indexName+tmpSuffix)
	err := s.writeIndex(tmp, &v, ids)
	if err == nil {
		err = os.Rename(tmp, filepath.Join(s.dir, indexName))
	}
	if err == nil {
		err = s.syncDir()
	}
	if err != nil {
		return fmt.Errorf("embedded: writing index: %w", err)
	}
	s.ckptCount.Store(v.head)
	return nil
}

// crcWriter writes through a bufio.Writer and keeps a CRC-32C of what passed.
type crcWriter struct {
	w   *bufio.Writer
	crc uint32
}

func (c *crcWriter) Write(b []byte) (int, error) {
	c.crc = crc32.Update(c.crc, castagnoli, b)
	return c.w.Write(b)
}

func (s *Store) writeIndex(path string, v *view, ids []uuid.UUID) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close() // the write error is the one to report
		}
	}()
	w := &crcWriter{w: bufio.NewWriterSize(f, 1<<20)}
	le := binary.LittleEndian
	n := int(v.head)
	h := make([]byte, indexHeaderSize, 64<<10)
	copy(h, indexMagic)
	le.PutUint32(h[8:], formatVersion)
	le.PutUint64(h[16:], uint64(v.end))
	le.PutUint64(h[24:], uint64(n))
	le.PutUint64(h[32:], uint64(len(v.streams)))
	if _, err := w.Write(h); err != nil {
		return err
	}
	b := h[:0]
	flush := func(room int) error {
		if cap(b)-len(b) >= room {
			return nil
		}
		_, err := w.Write(b)
		b = b[:0]
		return err
	}
	for _, st := range v.streams {
		if err := flush(1 + len(st.name)); err != nil {
			return err
		}
		b = append(b, byte(len(st.name)))
		b = append(b, st.name...)
	}
	for p := range n {
		if err := flush(4); err != nil {
			return err
		}
		b = le.AppendUint32(b, uint32(v.recordEnd(uint64(p))-v.offsets[p]))
	}
	for p := range n {
		if err := flush(4); err != nil {
			return err
		}
		b = le.AppendUint32(b, v.posStream[p])
	}
	for p := range n {
		if err := flush(16); err != nil {
			return err
		}
		b = append(b, ids[p][:]...)
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	if _, err := w.w.Write(le.AppendUint32(nil, w.crc)); err != nil {
		return err
	}
	if err := w.w.Flush(); err != nil {
		return err
	}
	if !s.opts.NoSync {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	return f.Close()
}

// loadIndex loads the index file into the (empty) in-memory indexes if it is
// intact and agrees with the log of the given size, and returns how many
// events and bytes of the log it covers. Otherwise it leaves the indexes
// empty and says why in the log: a scan from the start will rebuild them.
func (s *Store) loadIndex(size int64) (uint64, int64, bool) {
	data, err := os.ReadFile(filepath.Join(s.dir, indexName))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, false
	}
	if err == nil {
		err = s.parseIndex(data, size)
	}
	if err != nil {
		s.log.Warn("ignoring the index; scanning the whole log", "err", err)
		s.resetIndexes()
		return 0, 0, false
	}
	return uint64(len(s.offsets)), s.wend, true
}

var errBadIndex = errors.New("index unusable")

func (s *Store) parseIndex(data []byte, size int64) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{errBadIndex}, args...)...)
	}
	le := binary.LittleEndian
	if len(data) < indexHeaderSize+indexTrailer || string(data[:8]) != indexMagic {
		return bad("no index header")
	}
	body := data[:len(data)-indexTrailer]
	if crc32.Checksum(body, castagnoli) != le.Uint32(data[len(body):]) {
		return bad("checksum mismatch")
	}
	if v := le.Uint32(data[8:]); v != formatVersion {
		return bad("format version %d", v)
	}
	end, n64, m64 := int64(le.Uint64(data[16:])), le.Uint64(data[24:]), le.Uint64(data[32:])
	if end < headerSize || end > size {
		return bad("covers %d bytes of a log of %d", end, size)
	}
	rest := body[indexHeaderSize:]
	if n64 > uint64(len(rest))/24 || m64 > n64 {
		return bad("counts %d events, %d streams in %d bytes", n64, m64, len(rest))
	}
	n, m := int(n64), int(m64)
	// A large log has hundreds of thousands of streams: their names go into
	// one string and their records into one slice.
	lens := make([]int, m)
	total := 0
	for i, r := 0, rest; i < m; i++ {
		if len(r) < 1 || len(r) < 1+int(r[0]) {
			return bad("stream names cut short")
		}
		lens[i] = int(r[0])
		total += lens[i]
		r = r[1+lens[i]:]
	}
	var names strings.Builder
	names.Grow(total)
	for _, l := range lens {
		names.Write(rest[1 : 1+l])
		rest = rest[1+l:]
	}
	all := names.String()
	slab := make([]stream, m)
	s.streamList = make([]*stream, 0, m)
	if len(s.streams) == 0 {
		s.streams = make(map[string]*stream, m)
	}
	known := len(s.streams)
	for i, off := 0, 0; i < m; i++ {
		name := all[off : off+lens[i]]
		off += lens[i]
		if eventstore.ValidateStream(name) != nil {
			return bad("bad stream name %q", name)
		}
		st := &slab[i]
		st.name, st.num = name, uint32(i)
		if s.streams[name] = st; len(s.streams) != known+i+1 { // one map operation, not a lookup and then a store
			return bad("repeated stream name %q", name)
		}
		s.streamList = append(s.streamList, st)
	}
	if len(rest) != 24*n {
		return bad("%d bytes of per-event entries for %d events", len(rest), n)
	}
	sizes, nums, idb := rest[:4*n], rest[4*n:8*n], rest[8*n:]
	s.offsets = make([]int64, n)
	s.posStream = make([]uint32, n)
	s.posID = make([]uuid.UUID, n)
	counts := make([]int, m)
	off := int64(headerSize)
	for p := range n {
		l := le.Uint32(sizes[4*p:])
		num := le.Uint32(nums[4*p:])
		if l < minRecord || l > prefixSize+maxBody || int(num) >= m {
			return bad("entry %d: record size %d, stream %d", p, l, num)
		}
		s.offsets[p] = off
		off += int64(l)
		s.posStream[p] = num
		counts[num]++
		s.posID[p] = uuid.UUID(idb[16*p : 16*p+16])
	}
	if off != end {
		return bad("record sizes add up to %d, not %d", off, end)
	}
	backing := make([]uint64, n) // every stream's positions, one after the other
	for i, st := range s.streamList {
		if counts[i] == 0 {
			return bad("stream %q has no event", st.name)
		}
		st.positions, backing = backing[:0:counts[i]], backing[counts[i]:]
	}
	s.ids = newIDIndex(n)
	for p := range n {
		st := s.streamList[s.posStream[p]]
		st.positions = append(st.positions, uint64(p))
		if !s.ids.put(uint64(p), s.posID) {
			return bad("event id %s listed twice", s.posID[p])
		}
	}
	s.wend = end
	// The last covered record must be in the log, where the index says.
	if n > 0 {
		w := window{f: s.f, size: end}
		var r rec
		p := n - 1
		l, st, err := w.record(s.offsets[p], &r)
		if err != nil {
			return err
		}
		if st != recOK || s.offsets[p]+int64(l) != end || r.position != uint64(p) || r.id != s.posID[p] ||
			string(r.stream) != s.streamList[s.posStream[p]].name || r.flags&flagCommit == 0 {
			return bad("the log does not hold the last event it lists at offset %d", s.offsets[p])
		}
	}
	return nil
}

// verifyCovered reads every record the index covers and checks its checksum
// and that it is what the index says. A damaged record is corruption (the
// index only covers synced writes): an error wrapping ErrCorrupt. A sound
// record that disagrees with the index makes the index unusable: false.
func (s *Store) verifyCovered() (bool, error) {
	n := len(s.offsets)
	w := window{f: s.f, size: s.wend}
	versions := make([]uint64, len(s.streamList))
	var r rec
	for p := range n {
		off := s.offsets[p]
		l, st, err := w.record(off, &r)
		if err != nil {
			return false, err
		}
		if st != recOK {
			return false, corruptError(logName, off, fmt.Sprintf("%v in the record of position %d", st, p))
		}
		end := s.wend
		if p+1 < n {
			end = s.offsets[p+1]
		}
		num := s.posStream[p]
		if off+int64(l) != end || r.position != uint64(p) || r.id != s.posID[p] ||
			r.version != versions[num] || string(r.stream) != s.streamList[num].name {
			s.log.Warn("ignoring the index; scanning the whole log",
				"err", fmt.Errorf("%w: the record at offset %d is not the one listed for position %d", errBadIndex, off, p))
			return false, nil
		}
		versions[num]++
	}
	return true, nil
}
