package projections

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/diskfs"
)

// SnapshotFiles keeps snapshots of folds as files in a directory, one per
// name, each replaced atomically (write, fsync, rename) and ending with a
// CRC-32C of its content. A snapshot is only a shortcut: Load refuses one
// that does not match the log it is loaded for (another log, a log that was
// reset, or a binary whose snapshot types have changed) or whose checksum
// fails, and the caller then folds from position 0 as if there were none.
type SnapshotFiles struct {
	Dir string
}

// snapshotHeader precedes the gob-encoded snapshot in a file.
type snapshotHeader struct {
	Magic       string
	Types       string // fingerprint of the snapshot's Go type: a changed type makes old files unusable
	Next        uint64 // the snapshot covers the log before this position
	LastEventID string // id of the event at Next-1, to recognise the log
}

// bulky is a snapshot with large lists that Save writes after the rest (its
// gob message), in pieces of about 1 MiB, each its length (a varint) and its
// bytes, and Read reads back the same way into one buffer: neither then
// holds a whole large snapshot's encoding at once.
type bulky interface {
	withoutBulk() any                           // a copy without the large lists, of the same type
	writeBulk(emit func([]byte) error) error    // the large lists, in pieces
	readBulk(next func() ([]byte, error)) error // into the value the rest was decoded into
}

// maxPiece bounds a piece of a bulky snapshot that Read accepts (a piece is
// about 1 MiB and one element, which is at most a few MiB).
const maxPiece = 64 << 20

// snapshotMagic names the file format and the fold's semantics. Bump the
// number whenever a fold would give another result for the same events (a
// fixed bug, a new rule): snapshots written before then are then ignored,
// and the first start after the upgrade folds the log from the beginning.
const snapshotMagic = "turnstile snapshot 4"

// ErrSnapshotMismatch says a snapshot file exists but cannot be used for this log.
var ErrSnapshotMismatch = errors.New("snapshot does not match the log")

// Save writes v, a fold that covers the log before next, under name.
// lastID is the id of the event at next-1 ("" when next is 0).
func (f SnapshotFiles) Save(name string, next uint64, lastID string, v any) (err error) {
	if !checkpointName.MatchString(name) {
		return fmt.Errorf("snapshot name %q is invalid", name)
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("save snapshot %s: %w", name, err)
		}
	}()
	if err := (diskfs.OS{}).MkdirAll(f.Dir); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(f.Dir, "."+name+".*.tmp") // mode 0600: the owner's alone, as the log's files
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	sum := crc32.New(castagnoli)
	w := bufio.NewWriterSize(io.MultiWriter(tmp, sum), 1<<20)
	err = encodeSnapshot(w, snapshotHeader{Magic: snapshotMagic, Types: typeFingerprint(reflect.TypeOf(v)), Next: next, LastEventID: lastID}, v)
	err = errors.Join(err, w.Flush())
	if err == nil { // the trailer: a CRC-32C of everything before it
		_, err = tmp.Write(binary.LittleEndian.AppendUint32(nil, sum.Sum32()))
	}
	err = errors.Join(err, tmp.Sync(), tmp.Close())
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(f.Dir, name+".snapshot")); err != nil {
		return err
	}
	if d, err := os.Open(f.Dir); err == nil { // make the rename durable
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// Load reads the snapshot saved under name into v (a pointer) after checking
// it against store: the event at its position must be in the log with the id
// it recorded. It reports false when there is no snapshot, and returns an
// error wrapping ErrSnapshotMismatch when there is one that cannot be used;
// either way v must not be used then.
func (f SnapshotFiles) Load(ctx context.Context, store eventstore.Store, name string, v any) (bool, error) {
	info, ok, err := f.Read(name, v)
	if !ok || err != nil {
		return false, err
	}
	if err := info.Check(ctx, store); err != nil {
		return false, err
	}
	return true, nil
}

// SnapshotInfo says which log and position a snapshot that was read belongs to.
type SnapshotInfo struct {
	Name        string
	Next        uint64
	LastEventID string
}

// Read decodes the snapshot saved under name into v (a pointer) without
// looking at any log, so that it can run while the log opens; Check must
// pass before v is used. It reports false when there is no snapshot, and
// errors wrap ErrSnapshotMismatch when there is one that cannot be read.
func (f SnapshotFiles) Read(name string, v any) (SnapshotInfo, bool, error) {
	if !checkpointName.MatchString(name) {
		return SnapshotInfo{}, false, fmt.Errorf("snapshot name %q is invalid", name)
	}
	fh, err := os.Open(filepath.Join(f.Dir, name+".snapshot"))
	if errors.Is(err, os.ErrNotExist) {
		return SnapshotInfo{}, false, nil
	}
	if err != nil {
		return SnapshotInfo{}, false, fmt.Errorf("load snapshot %s: %w", name, err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return SnapshotInfo{}, false, fmt.Errorf("load snapshot %s: %w", name, err)
	}
	size := fi.Size() - 4 // the content; the trailer after it
	if size < 0 {
		return SnapshotInfo{}, false, fmt.Errorf("load snapshot %s: %w: shorter than its checksum", name, ErrSnapshotMismatch)
	}
	// One pass: the checksum is taken as the content is decoded, and
	// compared once all of it is read, before the caller may use v.
	sum := crc32.New(castagnoli)
	br := bufio.NewReaderSize(io.TeeReader(io.LimitReader(fh, size), sum), 1<<20)
	h, err := decodeSnapshot(br, v)
	if err != nil {
		return SnapshotInfo{}, false, fmt.Errorf("load snapshot %s: %w", name, err)
	}
	if err := checkTrailer(fh, br, sum, size); err != nil {
		return SnapshotInfo{}, false, fmt.Errorf("load snapshot %s: %w: %v", name, ErrSnapshotMismatch, err)
	}
	return SnapshotInfo{Name: name, Next: h.Next, LastEventID: h.LastEventID}, true, nil
}

// encodeSnapshot writes h and v (its bulk after the rest, when v is bulky).
func encodeSnapshot(w io.Writer, h snapshotHeader, v any) error {
	enc := gob.NewEncoder(w)
	bv, ok := v.(bulky)
	if !ok {
		return errors.Join(enc.Encode(h), enc.Encode(v))
	}
	if err := errors.Join(enc.Encode(h), enc.Encode(bv.withoutBulk())); err != nil {
		return err
	}
	return bv.writeBulk(func(p []byte) error {
		_, err := w.Write(binary.AppendUvarint(nil, uint64(len(p))))
		if err == nil {
			_, err = w.Write(p)
		}
		return err
	})
}

// snapshotReader is what decodeSnapshot reads from: gob reads no further
// than each message from a ByteReader.
type snapshotReader interface {
	io.Reader
	io.ByteReader
}

// decodeSnapshot reads what encodeSnapshot wrote into v (a pointer) and
// returns its header; errors wrap ErrSnapshotMismatch.
func decodeSnapshot(br snapshotReader, v any) (snapshotHeader, error) {
	dec := gob.NewDecoder(br)
	var h snapshotHeader
	if err := dec.Decode(&h); err != nil {
		return h, fmt.Errorf("%w: unreadable header: %v", ErrSnapshotMismatch, err)
	}
	t := reflect.TypeOf(v).Elem()
	switch {
	case h.Magic != snapshotMagic:
		return h, fmt.Errorf("%w: format %q", ErrSnapshotMismatch, h.Magic)
	case h.Types != typeFingerprint(t) && h.Types != typeFingerprintBefore(t):
		return h, fmt.Errorf("%w: written by a binary with other snapshot types", ErrSnapshotMismatch)
	}
	err := dec.Decode(v)
	if bv, ok := v.(bulky); ok && err == nil {
		var piece []byte // each piece in the room of the last
		err = bv.readBulk(func() ([]byte, error) {
			n, err := binary.ReadUvarint(br)
			switch {
			case err != nil:
				return nil, fmt.Errorf("bulk: %w", err)
			case n > maxPiece:
				return nil, fmt.Errorf("bulk: a piece of %d bytes", n)
			case uint64(cap(piece)) < n:
				piece = make([]byte, n, max(n, 2<<20))
			}
			piece = piece[:n]
			if _, err := io.ReadFull(br, piece); err != nil {
				return nil, fmt.Errorf("bulk: %w", err)
			}
			return piece, nil
		})
	}
	if err != nil {
		return h, fmt.Errorf("%w: %v", ErrSnapshotMismatch, err)
	}
	return h, nil
}

// castagnoli is the CRC-32C table of the snapshot files' trailer.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checkTrailer reads what is left of the content through br (nothing, for
// a file Save wrote), then compares sum, the CRC-32C of the content, with
// the file's trailer at offset size.
func checkTrailer(fh *os.File, br io.Reader, sum hash.Hash32, size int64) error {
	if n, err := io.Copy(io.Discard, br); err != nil {
		return err
	} else if n > 0 {
		return fmt.Errorf("%d bytes after the snapshot", n)
	}
	var trailer [4]byte
	if _, err := fh.ReadAt(trailer[:], size); err != nil {
		return err
	}
	if binary.LittleEndian.Uint32(trailer[:]) != sum.Sum32() {
		return errors.New("checksum mismatch: the file is damaged (or was written by an older build)")
	}
	return nil
}

// Check verifies that the snapshot belongs to store's log: the event at its
// position-1 is there with the id it recorded.
func (i SnapshotInfo) Check(ctx context.Context, store eventstore.Store) error {
	if i.Next == 0 {
		return nil
	}
	evs, err := store.ReadAll(ctx, i.Next-1, 1)
	if err != nil {
		return fmt.Errorf("load snapshot %s: check against the log: %w", i.Name, err)
	}
	if len(evs) == 0 || evs[0].Position != i.Next-1 || evs[0].ID.String() != i.LastEventID {
		return fmt.Errorf("load snapshot %s: %w: the log has no event %s at position %d", i.Name, ErrSnapshotMismatch, i.LastEventID, i.Next-1)
	}
	return nil
}

// typeFingerprintBefore is t's fingerprint without the fields tagged
// `snapshot:"added"`: the types of the build before them. gob leaves a
// field the encoding lacks at its zero value, so such a file decodes into
// this build's type; the added fields' doc says what their zero means.
func typeFingerprintBefore(t reflect.Type) string { return fingerprint(t, true) }

// typeFingerprint names every field of t, recursively, so that any change to
// a snapshot type changes it.
func typeFingerprint(t reflect.Type) string { return fingerprint(t, false) }

func fingerprint(t reflect.Type, before bool) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var b strings.Builder
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		b.WriteString(t.String())
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			b.WriteByte('<')
			walk(t.Elem())
			b.WriteByte('>')
		case reflect.Map:
			b.WriteByte('<')
			walk(t.Key())
			b.WriteByte(',')
			walk(t.Elem())
			b.WriteByte('>')
		case reflect.Struct:
			if seen[t] || t.PkgPath() == "time" {
				return
			}
			seen[t] = true
			b.WriteByte('{')
			for i := range t.NumField() {
				fd := t.Field(i)
				if before && fd.Tag.Get("snapshot") == "added" {
					continue
				}
				b.WriteString(fd.Name)
				b.WriteByte(' ')
				walk(fd.Type)
				b.WriteByte(';')
			}
			b.WriteByte('}')
		}
	}
	walk(t)
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}
