package archive

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"os"

	"github.com/turnstile/turnstile/domain"
)

// An index file, segment-<first>-<last>.index.json.gz, is one gzip-compressed
// JSON object: {"header": {…}, "streams": [{"stream": …, "positions": […]}, …]}.
// The header describes the segment (positions, count, the chain hashes at
// its ends, the SHA-256 and size of the segment file, where each gzip member
// of the segment starts, and a filter of the streams it holds); "streams"
// lists every stream with events in the segment, sorted by name, with their
// positions. The header comes first, so Open reads only the headers.

// indexFormat is the version of the index layout written here.
const indexFormat = 1

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
	// Blocks are the gzip members of the segment: the first position of
	// each and its byte offset in the file, in order.
	Blocks []block `json:"blocks"`
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

// streamEntry is one stream of an index.
type streamEntry struct {
	Stream    string   `json:"stream"`
	Positions []uint64 `json:"positions"`
}

// readHeader reads only the header of the index file at path.
func readHeader(path string) (header, error) {
	var h header
	f, err := os.Open(path)
	if err != nil {
		return h, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return h, fmt.Errorf("index %s: %w", path, err)
	}
	dec := json.NewDecoder(zr)
	if err := expectKey(dec, "header", true); err != nil {
		return h, fmt.Errorf("index %s: %w", path, err)
	}
	if err := dec.Decode(&h); err != nil {
		return h, fmt.Errorf("index %s: header: %w", path, err)
	}
	if h.Format != indexFormat {
		return h, fmt.Errorf("index %s: format %d, this build reads %d", path, h.Format, indexFormat)
	}
	return h, nil
}

// readStreams calls each for every stream entry of the index file at path,
// in name order, until each returns false.
func readStreams(path string, each func(streamEntry) bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("index %s: %w", path, err)
	}
	dec := json.NewDecoder(zr)
	if err := expectKey(dec, "header", true); err != nil {
		return fmt.Errorf("index %s: %w", path, err)
	}
	var skip json.RawMessage
	if err := dec.Decode(&skip); err != nil {
		return fmt.Errorf("index %s: header: %w", path, err)
	}
	if err := expectKey(dec, "streams", false); err != nil {
		return fmt.Errorf("index %s: %w", path, err)
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return fmt.Errorf("index %s: streams is not a list (%v)", path, err)
	}
	for dec.More() {
		var s streamEntry
		if err := dec.Decode(&s); err != nil {
			return fmt.Errorf("index %s: streams: %w", path, err)
		}
		if !each(s) {
			return nil
		}
	}
	return nil
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

// writeIndex writes the index (header, then the streams sorted by name) to w.
func writeIndex(w io.Writer, h *header, streams []streamEntry) error {
	zw := gzip.NewWriter(w)
	hb, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(zw, "{\"header\":%s,\n\"streams\":[", hb); err != nil {
		return err
	}
	for i := range streams {
		sb, err := json.Marshal(&streams[i])
		if err != nil {
			return err
		}
		sep := ",\n"
		if i == 0 {
			sep = "\n"
		}
		if _, err := io.WriteString(zw, sep); err != nil {
			return err
		}
		if _, err := zw.Write(sb); err != nil {
			return err
		}
	}
	if _, err := io.WriteString(zw, "\n]}\n"); err != nil {
		return err
	}
	return zw.Close()
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
