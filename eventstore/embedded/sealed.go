package embedded

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/diskfs"
)

// Sealed file layout. See doc.go.
const (
	sealedMagic      = "TRNSTSLD"
	sealedHeaderSize = 16
	sealedFooterSize = 72 // format 2; format 1's is 56 (no first position)
	sealedFormat     = 2
	sealedTrailer    = 4
	idEntrySize      = 24 // id, position
	streamFixed      = 25 // name length, count, first list entry, base version (plus the name)
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
	f          diskfs.File // nil when n == first
	first      uint64      // first position covered (the live log's start)
	n          uint64      // positions below n are sealed
	firstOff   int64       // logical offset of the record of position first
	end        int64       // log bytes covered: the end of the record of position n-1
	m          uint64      // streams
	idsOff     int64
	streamsOff int64
	listsOff   int64
	idFence    []uint64 // idPrefix of sorted id i*fenceEvery
	nameFence  []string // name of stream entry i*fenceEvery
	nameOff    []int64  // file offset of stream entry i*fenceEvery
	ids        bloom
	names      bloom
	reads      *atomic.Uint64 // counts the look-ups the filters let through (may be nil)
	name       string         // its file's name in the data directory
	size       int64          // its file's size
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
	return s.findIDHashed(id, hashID(id))
}

// findIDHashed is findID for an id whose hashID is h (an index asks each
// of its levels with the one hash).
func (s *sealed) findIDHashed(id uuid.UUID, h uint64) (uint64, bool, error) {
	if !s.ids.has(h) {
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
	count uint64 // its events in the level
	first uint64 // index of its first entry in the positions lists
	base  uint64 // the version of its first event in the level
}

// findStream looks a stream up by name.
func (s *sealed) findStream(name string) (sealedStream, bool, error) {
	return s.findStreamHashed(name, hashName(name))
}

// findStreamHashed is findStream for a name whose hashName is h.
func (s *sealed) findStreamHashed(name string, h uint64) (sealedStream, bool, error) {
	if !s.names.has(h) {
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
	e := streamEntry{name: b[1 : 1+l], sealedStream: sealedStream{count: le.Uint64(b[1+l:]), first: le.Uint64(b[9+l:]), base: le.Uint64(b[17+l:])}}
	return e, b[streamFixed+l:], true
}

func appendStreamEntry(b []byte, name []byte, count, first, base uint64) []byte {
	b = append(b, byte(len(name)))
	b = append(b, name...)
	b = binary.LittleEndian.AppendUint64(b, count)
	b = binary.LittleEndian.AppendUint64(b, first)
	return binary.LittleEndian.AppendUint64(b, base)
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
	e.base = le.Uint64(b[l+16:])
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

// fileSums computes the verification sums of what s lists, reading its
// sections sequentially.
func (s *sealed) fileSums() (sums, error) {
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
		for v := e.base; v < e.base+e.count; v++ {
			if _, err := io.ReadFull(lists, b[:8]); err != nil {
				return out, err
			}
			out.addVersion(h, v, le.Uint64(b[:8]))
		}
	}
	return out, nil
}
