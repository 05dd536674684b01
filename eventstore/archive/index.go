package archive

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/diskfs"
)

// An index file, segment-<first>-<last>.index.json.gz, is gzip-compressed
// JSON, one object:
//
//	{"header":{…},
//	"streams":[
//	{"stream":"action-a","positions":[0,7]},
//	…
//	]}
//
// The header describes the segment (positions, count, the chain hashes at
// its ends, the SHA-256 and size of the segment file, where each gzip member
// of the segment starts, a filter of the streams it holds, and where each
// block of the streams list starts); "streams" lists every stream with
// events in the segment, sorted by name, one a line, with its positions.
// The file is a series of gzip members (one stream to gzip -dc): the first
// holds the header and the opening of the list, then one member per
// streamBlock entries, then the closing. Open reads only the first member;
// a lookup reads one block.

// indexFormat is the version of the index layout written here.
const indexFormat = 1

// streamBlock is how many streams one gzip member of an index lists.
const streamBlock = 2048

// header is an index file's header.
type header struct {
	Format   int         `json:"format"`
	First    uint64      `json:"first"`
	Last     uint64      `json:"last"`
	Count    uint64      `json:"count"`
	PrevHash domain.Hash `json:"prev_hash"` // the chain hash before First
	LastHash domain.Hash `json:"last_hash"` // the chain hash of Last
	SHA256   string      `json:"sha256"`    // of the segment file, hex
	Bytes    int64       `json:"bytes"`     // of the segment file
	Streams  int         `json:"streams"`
	// FirstTime and LastTime are the log times of its first and last
	// events (absent in segments written before they were recorded).
	FirstTime time.Time `json:"first_time,omitzero"`
	LastTime  time.Time `json:"last_time,omitzero"`
	// Blocks are the gzip members of the segment: the first position of
	// each and its byte offset in the file, in order.
	Blocks []block `json:"blocks"`
	// StreamBlocks are the members of the streams list: the first stream
	// of each and its offset from the end of the index's first member.
	StreamBlocks []streamsAt `json:"stream_blocks"`
	// Filter is a Bloom filter of the segment's stream names (FilterK
	// probes of FNV-1a-derived hashes over len(Filter)*8 bits): a stream
	// it does not match has no event in the segment.
	Filter  []byte `json:"filter"`
	FilterK int    `json:"filter_k"`
}

// block is one gzip member of a segment.
type block struct {
	First  uint64 `json:"first"`
	Offset int64  `json:"offset"`
}

// streamsAt is one gzip member of an index's streams list.
type streamsAt struct {
	First  string `json:"first"`
	Offset int64  `json:"offset"`
}

// streamEntry is one stream of an index.
type streamEntry struct {
	Stream    string   `json:"stream"`
	Positions []uint64 `json:"positions"`
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// openIndex reads the header of the index file at path; the file is left
// open after the first member, whose end in the file is at.
func openIndex(fsys diskfs.FS, path string) (f diskfs.File, h header, at int64, size int64, err error) {
	f, err = fsys.Open(path)
	if err != nil {
		return nil, h, 0, 0, err
	}
	if size, err = f.Size(); err != nil {
		f.Close()
		return nil, h, 0, 0, err
	}
	cr := &countingReader{r: io.NewSectionReader(f, 0, size)}
	br := bufio.NewReader(cr)
	zr, err := gzip.NewReader(br)
	if err != nil {
		f.Close()
		return nil, h, 0, 0, fmt.Errorf("index %s: %w", path, err)
	}
	zr.Multistream(false)
	dec := json.NewDecoder(zr)
	if err = expectKey(dec, "header", true); err == nil {
		err = dec.Decode(&h)
	}
	if err == nil {
		_, err = io.Copy(io.Discard, zr) // the rest of the first member
	}
	if err != nil {
		f.Close()
		return nil, h, 0, 0, fmt.Errorf("index %s: header: %w", path, err)
	}
	if h.Format != indexFormat {
		f.Close()
		return nil, h, 0, 0, fmt.Errorf("index %s: format %d, this build reads %d", path, h.Format, indexFormat)
	}
	return f, h, cr.n - int64(br.Buffered()), size, nil
}

// readHeader reads only the header of the index file at path.
func readHeader(fsys diskfs.FS, path string) (header, error) {
	f, h, _, _, err := openIndex(fsys, path)
	if err == nil {
		f.Close()
	}
	return h, err
}

// readStreams calls each for the stream entries of the index file at path,
// in name order, from the block that may hold from ("" for all), until
// each returns false or the list ends.
func readStreams(fsys diskfs.FS, path, from string, each func(streamEntry) bool) error {
	f, h, at, size, err := openIndex(fsys, path)
	if err != nil {
		return err
	}
	defer f.Close()
	if len(h.StreamBlocks) == 0 {
		return nil
	}
	i, found := slices.BinarySearchFunc(h.StreamBlocks, from, func(b streamsAt, s string) int { return strings.Compare(b.First, s) })
	if !found && i > 0 {
		i--
	}
	off := at + h.StreamBlocks[i].Offset
	zr, err := gzip.NewReader(bufio.NewReader(io.NewSectionReader(f, off, max(size-off, 0))))
	if err != nil {
		return fmt.Errorf("index %s: streams: %w", path, err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		line := bytes.TrimSuffix(sc.Bytes(), []byte(","))
		if bytes.Equal(line, []byte("]}")) {
			return nil
		}
		var e streamEntry
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("index %s: streams: %w", path, err)
		}
		if !each(e) {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("index %s: streams: %w", path, err)
	}
	return fmt.Errorf("index %s: streams: the list does not end: %w", path, io.ErrUnexpectedEOF)
}

// expectKey reads the next object key (after the opening brace if open).
func expectKey(dec *json.Decoder, key string, open bool) error {
	if open {
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return fmt.Errorf("not a JSON object (%v)", err)
		}
	}
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if t != key {
		return fmt.Errorf("expected %q, found %v", key, t)
	}
	return nil
}

// writeIndex writes the index (header, then the streams sorted by name) to
// w, filling h.StreamBlocks.
func writeIndex(w io.Writer, h *header, streams []streamEntry) error {
	var list bytes.Buffer // the streams' members, after the first
	cw := &countingWriter{w: &list}
	zw := gzip.NewWriter(cw)
	h.StreamBlocks = h.StreamBlocks[:0]
	for i := range streams {
		if i%streamBlock == 0 {
			if i > 0 {
				if err := zw.Close(); err != nil {
					return err
				}
				zw.Reset(cw)
			}
			h.StreamBlocks = append(h.StreamBlocks, streamsAt{First: streams[i].Stream, Offset: cw.n})
		}
		sb, err := json.Marshal(&streams[i])
		if err != nil {
			return err
		}
		zw.Write(sb)
		if i < len(streams)-1 {
			zw.Write([]byte(",\n"))
		} else {
			zw.Write([]byte("\n"))
		}
	}
	zw.Write([]byte("]}\n"))
	if err := zw.Close(); err != nil {
		return err
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return err
	}
	first := gzip.NewWriter(w)
	if _, err := fmt.Fprintf(first, "{\"header\":%s,\n\"streams\":[\n", hb); err != nil {
		return err
	}
	if err := first.Close(); err != nil {
		return err
	}
	_, err = w.Write(list.Bytes())
	return err
}

// filterBitsPerStream sizes the filter: about 1 % false matches with 7 probes.
const (
	filterBitsPerStream = 10
	filterK             = 7
)

// newFilter returns a filter sized for n streams.
func newFilter(n int) []byte {
	return make([]byte, max(8, (n*filterBitsPerStream+7)/8))
}

func filterHashes(stream string) (uint32, uint32) {
	h := fnv.New64a()
	h.Write([]byte(stream))
	s := h.Sum64()
	return uint32(s), uint32(s>>32) | 1
}

func filterAdd(f []byte, k int, stream string) {
	h1, h2 := filterHashes(stream)
	m := uint32(len(f) * 8)
	for i := 0; i < k; i++ {
		bit := (h1 + uint32(i)*h2) % m
		f[bit/8] |= 1 << (bit % 8)
	}
}

func filterHas(f []byte, k int, stream string) bool {
	if len(f) == 0 {
		return true
	}
	h1, h2 := filterHashes(stream)
	m := uint32(len(f) * 8)
	for i := 0; i < k; i++ {
		bit := (h1 + uint32(i)*h2) % m
		if f[bit/8]&(1<<(bit%8)) == 0 {
			return false
		}
	}
	return true
}
