package embedded

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/maphash"
	"io"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/eventstore"
)

// Sealed file layout. See doc.go.
const (
	sealedMagic      = "TRNSTSLD"
	sealedHeaderSize = 16
	sealedFooterSize = 72 // format 2; format 1's is 56 (no first position)
	sealedFormat     = 2
	sealedTrailer    = 4
	idEntrySize      = 24 // id, position
	streamFixed      = 17 // name length, count, first list entry (plus the name)
	// fenceEvery is how many sorted ids one fence entry stands for: a
	// lookup reads one block of that many entries (3 KiB). Ids are looked
	// up on the disk only when the filter lets a new one through.
	fenceEvery = 128
	// nameFenceEvery is the same for stream entries (some 2 KiB a block):
	// smaller, because every append to a stream whose events are all sealed
	// (a waiting execution granted after a seal) reads one, on the committer.
	nameFenceEvery = 32
)

// streamBlocks holds the buffers findStream reads blocks into.
var streamBlocks = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// compareName compares a name read from the file with name, as
// strings.Compare would, without converting either.
func compareName(b []byte, name string) int {
	n := min(len(b), len(name))
	for i := range n {
		if b[i] != name[i] {
			if b[i] < name[i] {
				return -1
			}
			return 1
		}
	}
	switch {
	case len(b) < len(name):
		return -1
	case len(b) > len(name):
		return 1
	}
	return 0
}

// sealedSeed keys the in-memory hashes of the sealed part (filters and the
// verification sums); they are never stored.
var sealedSeed = maphash.MakeSeed()

// hashID hashes an id for the filters: two rounds of a 64-bit mixer keyed
// by random words, much cheaper than maphash for 16 bytes.
func hashID(id uuid.UUID) uint64 {
	hi, lo := binary.BigEndian.Uint64(id[:8]), binary.BigEndian.Uint64(id[8:])
	return mix(mix(hi^idKeys[0]) ^ lo ^ idKeys[1])
}

var idKeys = [2]uint64{maphash.Comparable(sealedSeed, 1), maphash.Comparable(sealedSeed, 2)}

func hashName(name string) uint64    { return maphash.String(sealedSeed, name) }
func hashNameB(name []byte) uint64   { return maphash.Bytes(sealedSeed, name) }
func idPrefix(id *uuid.UUID) uint64  { return binary.BigEndian.Uint64(id[:8]) }
func compareIDs(a, b *uuid.UUID) int { return bytes.Compare(a[:], b[:]) }

// mix is a 64-bit finaliser (splitmix64), for the verification sums.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// sums are order-independent digests of what a log holds, taken once from
// the records and once from the sealed file: equal sums mean the file lists
// exactly the log's (id, position) and (stream, version, position) triples,
// up to a 2^-64 chance.
type sums struct{ ids, versions uint64 }

func (s *sums) addID(id uuid.UUID, pos uint64) { s.ids += mix(hashID(id) ^ mix(pos+1)) }
func (s *sums) addVersion(nameHash, version, pos uint64) {
	s.versions += mix(nameHash ^ mix(version^mix(pos+0x5bd1e995)))
}

// sealed is the part of the log whose index lives in the sealed file:
// positions [first, n) (first is the live log's start). Only fences and filters stay in memory; a lookup is a
// binary search of a fence and one read of a block. It never changes once
// published; a store replaces it whole. Its file is closed by the os.File
// finaliser once no view refers to it (or by Close for the current one).
type sealed struct {
	f          file   // nil when n == first
	first      uint64 // first position covered (the live log's start)
	n          uint64 // positions below n are sealed
	firstOff   int64  // logical offset of the record of position first
	end        int64  // log bytes covered: the end of the record of position n-1
	m          uint64 // streams
	idsOff     int64
	streamsOff int64
	listsOff   int64
	idFence    []uint64 // idPrefix of sorted id i*fenceEvery
	nameFence  []string // name of stream entry i*fenceEvery
	nameOff    []int64  // file offset of stream entry i*fenceEvery
	ids        bloom
	names      bloom
	reads      *atomic.Uint64 // counts the look-ups the filters let through (may be nil)

	// trim, on a sealed part a trim wrote, is the start that comes with
	// it: the committer installs both at once (installSeal).
	trim *trimInstall
}

// emptySealed is a sealed part that covers nothing, for a live log that
// starts at position first, whose record is at logical offset off.
func emptySealed(first uint64, off int64) *sealed {
	return &sealed{first: first, n: first, firstOff: off, end: off}
}

// events is how many positions s covers.
func (s *sealed) events() uint64 { return s.n - s.first }

// memory is what s keeps in memory, in bytes (roughly).
func (s *sealed) memory() int {
	n := s.ids.bytes() + s.names.bytes() + 8*len(s.idFence) + 24*len(s.nameOff)
	for _, name := range s.nameFence {
		n += 16 + len(name)
	}
	return n
}

func (s *sealed) count() {
	if s.reads != nil {
		s.reads.Add(1)
	}
}

func (s *sealed) readAt(b []byte, off int64) error {
	if _, err := s.f.ReadAt(b, off); err != nil {
		if err == io.EOF {
			return fmt.Errorf("embedded: %s ends early at offset %d: %w", sealedName, off, eventstore.ErrCorrupt)
		}
		return fmt.Errorf("embedded: reading %s at offset %d: %w", sealedName, off, err)
	}
	return nil
}

// findID returns the position of the sealed event whose id is id.
func (s *sealed) findID(id uuid.UUID) (uint64, bool, error) {
	if !s.ids.has(hashID(id)) {
		return 0, false, nil
	}
	s.count()
	k := idPrefix(&id)
	// The id can only be in the blocks from the last one starting below k to
	// the last one starting at or below k (ids may share their prefix).
	last := sort.Search(len(s.idFence), func(i int) bool { return s.idFence[i] > k }) - 1
	if last < 0 {
		return 0, false, nil
	}
	first := max(0, sort.Search(len(s.idFence), func(i int) bool { return s.idFence[i] >= k })-1)
	from, to := uint64(first)*fenceEvery, min(uint64(last+1)*fenceEvery, s.events())
	b := make([]byte, (to-from)*idEntrySize)
	if err := s.readAt(b, s.idsOff+int64(from)*idEntrySize); err != nil {
		return 0, false, err
	}
	n := len(b) / idEntrySize
	i, ok := sort.Find(n, func(i int) int { return bytes.Compare(id[:], b[i*idEntrySize:i*idEntrySize+16]) })
	if !ok {
		return 0, false, nil
	}
	return binary.LittleEndian.Uint64(b[i*idEntrySize+16:]), true, nil
}

// sealedStream is what the sealed file holds about one stream.
type sealedStream struct {
	count uint64 // its versions
	first uint64 // index of its first entry in the positions lists
}

// findStream looks a stream up by name.
func (s *sealed) findStream(name string) (sealedStream, bool, error) {
	if !s.names.has(hashName(name)) {
		return sealedStream{}, false, nil
	}
	s.count()
	j := sort.Search(len(s.nameFence), func(i int) bool { return s.nameFence[i] > name }) - 1
	if j < 0 {
		return sealedStream{}, false, nil
	}
	to := s.listsOff
	if j+1 < len(s.nameOff) {
		to = s.nameOff[j+1]
	}
	bp := streamBlocks.Get().(*[]byte)
	defer streamBlocks.Put(bp)
	b := slices.Grow((*bp)[:0], int(to-s.nameOff[j]))[:to-s.nameOff[j]]
	*bp = b
	if err := s.readAt(b, s.nameOff[j]); err != nil {
		return sealedStream{}, false, err
	}
	for len(b) > 0 {
		e, rest, ok := parseStreamEntry(b)
		if !ok {
			return sealedStream{}, false, corruptError(sealedName, s.nameOff[j], "malformed stream entry")
		}
		switch c := compareName(e.name, name); {
		case c == 0:
			return e.sealedStream, true, nil
		case c > 0:
			return sealedStream{}, false, nil
		}
		b = rest
	}
	return sealedStream{}, false, nil
}

// positions returns versions [from, from+n) of a stream's list.
func (s *sealed) positions(st sealedStream, from, n uint64) ([]uint64, error) {
	b := make([]byte, 8*n)
	if err := s.readAt(b, s.listsOff+8*int64(st.first+from)); err != nil {
		return nil, err
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return out, nil
}

// versionOf returns the version at which the stream holds position pos.
func (s *sealed) versionOf(st sealedStream, pos uint64) (uint64, bool, error) {
	all, err := s.positions(st, 0, st.count)
	if err != nil {
		return 0, false, err
	}
	v, ok := slices.BinarySearch(all, pos)
	return uint64(v), ok, nil
}

// offsets fills out with the record offsets of positions [from, from+k)
// and the end of the last of them (k+1 values), k = len(out)-1, from+k <= n.
func (s *sealed) offsets(from uint64, out []int64, buf []byte) error {
	k := uint64(len(out) - 1)
	read := k + 1
	if from+k == s.n {
		read = k
	}
	b := buf[:8*read]
	if err := s.readAt(b, sealedHeaderSize+8*int64(from-s.first)); err != nil {
		return err
	}
	for i := range read {
		out[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	if read == k {
		out[k] = s.end
	}
	return nil
}

// streamEntry is one entry of the streams section.
type streamEntry struct {
	name []byte
	sealedStream
}

func parseStreamEntry(b []byte) (streamEntry, []byte, bool) {
	if len(b) < 1 {
		return streamEntry{}, nil, false
	}
	l := int(b[0])
	if len(b) < streamFixed+l {
		return streamEntry{}, nil, false
	}
	le := binary.LittleEndian
	e := streamEntry{name: b[1 : 1+l], sealedStream: sealedStream{count: le.Uint64(b[1+l:]), first: le.Uint64(b[9+l:])}}
	return e, b[streamFixed+l:], true
}

func appendStreamEntry(b []byte, name []byte, count, first uint64) []byte {
	b = append(b, byte(len(name)))
	b = append(b, name...)
	b = binary.LittleEndian.AppendUint64(b, count)
	return binary.LittleEndian.AppendUint64(b, first)
}

// readStreamEntry reads the next entry of a streams section; name is
// valid until the next call.
func readStreamEntry(r *bufio.Reader, e *streamEntry, buf []byte) error {
	l, err := r.ReadByte()
	if err != nil {
		return err
	}
	b := buf[:int(l)+streamFixed-1]
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	le := binary.LittleEndian
	e.name = b[:l]
	e.count = le.Uint64(b[l:])
	e.first = le.Uint64(b[l+8:])
	return nil
}

var errBadSealed = errors.New("sealed index unusable")

// sealedFooter is the footer of a sealed file.
type sealedFooter struct {
	first                        uint64
	firstOff                     int64
	n                            uint64
	end                          int64
	m                            uint64
	idsOff, streamsOff, listsOff int64
}

func (ft *sealedFooter) append(b []byte) []byte {
	le := binary.LittleEndian
	b = le.AppendUint64(b, ft.first)
	b = le.AppendUint64(b, uint64(ft.firstOff))
	b = le.AppendUint64(b, ft.n)
	b = le.AppendUint64(b, uint64(ft.end))
	b = le.AppendUint64(b, ft.m)
	b = le.AppendUint64(b, uint64(ft.idsOff))
	b = le.AppendUint64(b, uint64(ft.streamsOff))
	b = le.AppendUint64(b, uint64(ft.listsOff))
	return append(b, sealedMagic...)
}

// loadSealed opens the sealed file in dir and checks it against a log of
// logSize bytes: its checksum, that its sections add up, and that its ids and
// names are sorted. It builds the fences and filters from one sequential
// read. It does not look at the log. (nil, nil) means there is no file.
func loadSealed(fsys fileSystem, path string, logSize int64) (_ *sealed, err error) {
	f, err := fsys.Open(path)
	if err != nil {
		if isNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = f.Close() // read-only; the load error is the one to report
		}
	}()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{errBadSealed}, args...)...)
	}
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	hdr := make([]byte, 64)
	if size < sealedHeaderSize {
		return nil, bad("%d bytes", size)
	}
	if _, err := f.ReadAt(hdr[:sealedHeaderSize], 0); err != nil {
		return nil, err
	}
	version := le.Uint32(hdr[8:])
	if string(hdr[:8]) != sealedMagic || version != 1 && version != sealedFormat {
		return nil, bad("bad header")
	}
	footer := sealedFooterSize
	if version == 1 {
		footer -= 16 // no first position: it covers [0, n)
	}
	tail := footer + sealedTrailer
	if size < sealedHeaderSize+int64(tail) {
		return nil, bad("%d bytes", size)
	}
	fb := make([]byte, tail)
	if _, err := f.ReadAt(fb, size-int64(tail)); err != nil {
		return nil, err
	}
	ft := sealedFooter{firstOff: headerSize}
	if version != 1 {
		ft.first, ft.firstOff = le.Uint64(fb), int64(le.Uint64(fb[8:]))
		fb = fb[16:]
	}
	ft.n, ft.end, ft.m = le.Uint64(fb), int64(le.Uint64(fb[8:])), le.Uint64(fb[16:])
	ft.idsOff, ft.streamsOff, ft.listsOff = int64(le.Uint64(fb[24:])), int64(le.Uint64(fb[32:])), int64(le.Uint64(fb[40:]))
	if string(fb[48:56]) != sealedMagic {
		return nil, bad("no footer")
	}
	n := ft.n - ft.first // events covered
	if ft.first >= ft.n || n > uint64(size)/40 || ft.m == 0 || ft.m > n ||
		ft.idsOff != sealedHeaderSize+8*int64(n) || ft.streamsOff != ft.idsOff+idEntrySize*int64(n) ||
		ft.listsOff < ft.streamsOff+int64(ft.m)*(streamFixed+1) || ft.listsOff+8*int64(n)+int64(tail) != size {
		return nil, bad("sections do not add up (%d events, %d streams, %d bytes)", n, ft.m, size)
	}
	if ft.firstOff < headerSize || ft.end < ft.firstOff+int64(n)*minRecord || ft.end > logSize {
		return nil, bad("covers %d bytes of a log of %d", ft.end, logSize)
	}
	s := &sealed{f: f, first: ft.first, n: ft.n, firstOff: ft.firstOff, end: ft.end, m: ft.m, idsOff: ft.idsOff, streamsOff: ft.streamsOff, listsOff: ft.listsOff,
		ids: newBloom(int(n)), names: newBloom(int(ft.m))}
	// The checksum is taken of what the buffered reader reads from the file,
	// in big chunks; everything up to the trailer is read before it is
	// compared.
	sum := &crcReader{r: io.NewSectionReader(f, 0, size-sealedTrailer)}
	cr := bufio.NewReaderSize(sum, 1<<20)
	eb := make([]byte, 256+streamFixed)
	if _, err := io.ReadFull(cr, hdr[:sealedHeaderSize]); err != nil {
		return nil, err
	}
	// Record offsets: increasing, each record at least minRecord long.
	prev := ft.firstOff - minRecord
	for i := range n {
		if _, err := io.ReadFull(cr, hdr[:8]); err != nil {
			return nil, err
		}
		off := int64(le.Uint64(hdr))
		if off < prev+minRecord || off > ft.end-minRecord || i == 0 && off != ft.firstOff {
			return nil, bad("record offset %d of position %d", off, ft.first+i)
		}
		prev = off
	}
	// Sorted ids.
	var last uuid.UUID
	for i := range n {
		if _, err := io.ReadFull(cr, hdr[:idEntrySize]); err != nil {
			return nil, err
		}
		id := uuid.UUID(hdr[:16])
		if pos := le.Uint64(hdr[16:]); pos < ft.first || pos >= ft.n || i > 0 && compareIDs(&last, &id) >= 0 {
			return nil, bad("id entry %d", i)
		}
		if i%fenceEvery == 0 {
			s.idFence = append(s.idFence, idPrefix(&id))
		}
		s.ids.add(hashID(id))
		last = id
	}
	// Streams.
	var e streamEntry
	var prevName []byte
	total := uint64(0)
	off := ft.streamsOff
	for i := range ft.m {
		if err := readStreamEntry(cr, &e, eb); err != nil {
			return nil, err
		}
		if eventstore.ValidateStream(string(e.name)) != nil || i > 0 && bytes.Compare(prevName, e.name) >= 0 ||
			e.count == 0 || e.first != total || e.count > n-total {
			return nil, bad("stream entry %d (%q)", i, e.name)
		}
		if i%nameFenceEvery == 0 {
			s.nameFence = append(s.nameFence, string(e.name))
			s.nameOff = append(s.nameOff, off)
		}
		s.names.add(hashNameB(e.name))
		prevName = append(prevName[:0], e.name...)
		total += e.count
		off += int64(streamFixed + len(e.name))
	}
	if total != n || off != ft.listsOff {
		return nil, bad("streams count %d events in %d bytes", total, off-ft.streamsOff)
	}
	// Positions lists and the footer: only the checksum.
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return nil, err
	}
	if sum.n != size-sealedTrailer {
		return nil, bad("read %d of %d bytes", sum.n, size-sealedTrailer)
	}
	crc := sum.crc
	if _, err := f.ReadAt(fb[:4], size-sealedTrailer); err != nil {
		return nil, err
	}
	if crc != le.Uint32(fb) {
		return nil, bad("checksum mismatch")
	}
	return s, nil
}

// crcReader reads from r and keeps a count and a CRC-32C of what passed.
type crcReader struct {
	r   io.Reader
	crc uint32
	n   int64
}

func (c *crcReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.crc = crc32.Update(c.crc, castagnoli, b[:n])
	c.n += int64(n)
	return n, err
}

// fileSums computes the verification sums of what s lists, reading its
// sections sequentially. kept gives the versions below the start of the
// streams that continue across it.
func (s *sealed) fileSums(kept map[string]uint64) (sums, error) {
	var out sums
	le := binary.LittleEndian
	ids := bufio.NewReaderSize(io.NewSectionReader(s.f, s.idsOff, idEntrySize*int64(s.events())), 256<<10)
	var b [idEntrySize]byte
	for range s.events() {
		if _, err := io.ReadFull(ids, b[:]); err != nil {
			return out, err
		}
		out.addID(uuid.UUID(b[:16]), le.Uint64(b[16:]))
	}
	streams := bufio.NewReaderSize(io.NewSectionReader(s.f, s.streamsOff, s.listsOff-s.streamsOff), 256<<10)
	lists := bufio.NewReaderSize(io.NewSectionReader(s.f, s.listsOff, 8*int64(s.events())), 256<<10)
	buf := make([]byte, 256+streamFixed)
	var e streamEntry
	for range s.m {
		if err := readStreamEntry(streams, &e, buf); err != nil {
			return out, err
		}
		h := hashNameB(e.name)
		base := kept[string(e.name)]
		for v := base; v < base+e.count; v++ {
			if _, err := io.ReadFull(lists, b[:8]); err != nil {
				return out, err
			}
			out.addVersion(h, v, le.Uint64(b[:8]))
		}
	}
	return out, nil
}
