package embedded

// The start file: where the live log starts after a trim. It is written
// whole to start.tmp, synced, renamed over start, and the directory synced,
// so a crash leaves either the old start or the new one. All integers are
// little-endian:
//
//	0   8  magic "TRNSTSTA"
//	8   4  format version (1)
//	12  4  reserved, 0
//	16  8  first: the live log's first position
//	24  8  the logical offset of its record
//	32  8  the first position of the segment that holds it
//	40  8  that segment's logical base
//	48 32  the chain hash of the event at first-1 (zero if the store keeps none)
//	80  8  K: streams that continue across the start
//	88  …  K entries sorted by name: name length (1), name, its versions below first (8)
//	    4  CRC-32C of everything before
//
// A directory without a start file starts at position 0 in the file "log".

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"slices"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/diskfs"
)

const (
	startName    = "start"
	startMagic   = "TRNSTSTA"
	startVersion = 1
	startFixed   = 88
)

// startState is where the live log starts. It never changes once published;
// a trim replaces it whole.
type startState struct {
	first    uint64      // the live log's first position
	off      int64       // logical offset of its record
	segFirst uint64      // first position of the segment that holds it
	segBase  int64       // that segment's logical base
	prev     domain.Hash // chain hash of the event at first-1
	// kept holds, for each stream with versions below first that continues
	// (a kept stream), how many: its versions go on from there.
	kept map[string]uint64
}

// zeroStart is the start of a log that was never trimmed.
var zeroStart = &startState{off: headerSize, segBase: headerSize, kept: map[string]uint64{}}

func (st *startState) encode() []byte {
	le := binary.LittleEndian
	b := make([]byte, 0, startFixed+len(st.kept)*32+4)
	b = append(b, startMagic...)
	b = le.AppendUint32(b, startVersion)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint64(b, st.first)
	b = le.AppendUint64(b, uint64(st.off))
	b = le.AppendUint64(b, st.segFirst)
	b = le.AppendUint64(b, uint64(st.segBase))
	b = append(b, st.prev[:]...)
	b = le.AppendUint64(b, uint64(len(st.kept)))
	names := make([]string, 0, len(st.kept))
	for name := range st.kept {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		b = append(b, byte(len(name)))
		b = append(b, name...)
		b = le.AppendUint64(b, st.kept[name])
	}
	return le.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeStart(b []byte) (*startState, error) {
	le := binary.LittleEndian
	bad := func(what string) error { return corruptError(startName, 0, what) }
	if len(b) < startFixed+4 || string(b[:8]) != startMagic {
		return nil, bad("not a start file")
	}
	if v := le.Uint32(b[8:]); v != startVersion {
		return nil, bad(fmt.Sprintf("format version %d, this build reads %d", v, startVersion))
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != le.Uint32(b[len(b)-4:]) {
		return nil, bad("checksum mismatch")
	}
	st := &startState{first: le.Uint64(b[16:]), off: int64(le.Uint64(b[24:])), segFirst: le.Uint64(b[32:]),
		segBase: int64(le.Uint64(b[40:])), kept: map[string]uint64{}}
	copy(st.prev[:], b[48:80])
	k := le.Uint64(b[80:])
	if st.segFirst > st.first || st.segBase < headerSize || st.off < st.segBase {
		return nil, bad("its fields do not add up")
	}
	rest := body[startFixed:]
	var prev []byte
	for range k {
		if len(rest) < 1 || len(rest) < 1+int(rest[0])+8 {
			return nil, bad("a stream entry is cut short")
		}
		name := rest[1 : 1+int(rest[0])]
		if eventstore.ValidateStream(string(name)) != nil || prev != nil && bytes.Compare(prev, name) >= 0 {
			return nil, bad(fmt.Sprintf("stream entry %q", name))
		}
		st.kept[string(name)] = le.Uint64(rest[1+len(name):])
		prev, rest = name, rest[1+len(name)+8:]
	}
	if len(rest) != 0 {
		return nil, bad("bytes after the stream entries")
	}
	return st, nil
}

// loadStart reads the start file in dir: zeroStart if there is none.
func loadStart(fsys diskfs.FS, dir string) (*startState, error) {
	f, err := fsys.Open(filepath.Join(dir, startName))
	if diskfs.IsNotExist(err) {
		return zeroStart, nil
	}
	if err != nil {
		return nil, fmt.Errorf("embedded: opening %s: %w", startName, err)
	}
	defer func() { _ = f.Close() }() // read-only
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("embedded: reading %s: %w", startName, err)
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, fmt.Errorf("embedded: reading %s: %w", startName, err)
	}
	return decodeStart(b)
}

// writeStart replaces the start file atomically: temporary file, fsync,
// rename, fsync of the directory.
func (s *Store) writeStart(st *startState) error {
	tmp := filepath.Join(s.dir, startName+tmpSuffix)
	err := writeFileSync(s.fs, tmp, st.encode(), !s.opts.NoSync)
	if err == nil {
		err = s.fs.Rename(tmp, filepath.Join(s.dir, startName))
	}
	if err == nil {
		err = s.syncDir()
	}
	if err != nil {
		return fmt.Errorf("embedded: writing %s: %w", startName, err)
	}
	return nil
}
