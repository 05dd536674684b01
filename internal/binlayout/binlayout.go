// Package binlayout writes and reads the compact binary layouts of
// turnstile's snapshots (domain's waiters, the read model's execution
// records): unsigned and signed varints, strings and byte strings after
// their length, read back from a sequence of pieces so that a large
// snapshot is never held whole. It knows nothing of what it encodes; it
// imports only the standard library, so every layer may use it.
package binlayout

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ChunkSize is about how large the pieces of a chunked encoding are: a
// reader then never holds more than one piece of a large snapshot.
const ChunkSize = 1 << 20

// AppendString appends s after its length.
func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendBytes appends p's length plus one, or 0 for nil, then p, so that
// Reader.Bytes gives nil and empty back apart.
func AppendBytes(b, p []byte) []byte {
	if p == nil {
		return binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(p))+1)
	return append(b, p...)
}

// OnePiece returns a source of pieces that gives data, then fails.
func OnePiece(data []byte) func() ([]byte, error) {
	done := false
	return func() ([]byte, error) {
		if done {
			return nil, errors.New("truncated")
		}
		done = true
		return data, nil
	}
}

// Reader reads a layout from the pieces next gives. Call Refill between
// elements: it takes the next piece once the current one is used up. The
// first error sticks, and reads after it return zero values.
type Reader struct {
	b    []byte
	off  int
	err  error
	next func() ([]byte, error)
}

// NewReader returns a reader of the pieces next gives, the first taken.
func NewReader(next func() ([]byte, error)) *Reader {
	r := &Reader{next: next}
	r.Refill()
	return r
}

// Refill takes the next piece if the current one is used up.
func (r *Reader) Refill() {
	if r.err != nil || r.off < len(r.b) {
		return
	}
	b, err := r.next()
	if err != nil {
		r.err = err
		return
	}
	r.b, r.off = b, 0
}

// Err returns the first error.
func (r *Reader) Err() error { return r.err }

// Fail records err unless an error came first.
func (r *Reader) Fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// Left returns how many bytes of the current piece are unread.
func (r *Reader) Left() int { return len(r.b) - r.off }

func (r *Reader) truncated(what string) {
	r.Fail(fmt.Errorf("truncated at byte %d reading %s", r.off, what))
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if r.err != nil || r.off >= len(r.b) {
		r.truncated("a byte")
		return 0
	}
	r.off++
	return r.b[r.off-1]
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.truncated("a number")
		return 0
	}
	r.off += n
	return v
}

// Varint reads a signed varint.
func (r *Reader) Varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.truncated("a number")
		return 0
	}
	r.off += n
	return v
}

// Raw reads n bytes; they are the piece's own (copy them to keep them
// past the next Refill).
func (r *Reader) Raw(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		r.truncated("bytes")
		return nil
	}
	p := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return p
}

// Field reads what AppendString wrote, as the piece's own bytes.
func (r *Reader) Field() []byte { return r.Raw(r.Uvarint()) }

// String reads what AppendString wrote.
func (r *Reader) String() string { return string(r.Field()) }

// Bytes reads what AppendBytes wrote, as a copy (nil for nil).
func (r *Reader) Bytes() []byte {
	n := r.Uvarint()
	if n == 0 || r.err != nil {
		return nil
	}
	return append([]byte{}, r.Raw(n-1)...)
}
