package domain

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// waitersFormat is the first byte of Waiters' binary form. Change it with the
// layout: a snapshot in another layout is then refused, not misread.
const waitersFormat = 1

// Bits of a waiter's flags byte in Waiters' binary form.
const (
	waiterUTC   = 1 << iota // EnqueuedAt is UTC: Unix nanoseconds follow (else its MarshalBinary form)
	waiterExtra             // a WaiterRequest follows
)

// chunkSize is about how large the pieces of a chunked encoding are: a
// reader then never holds more than one piece of a large snapshot.
const chunkSize = 1 << 20

// MarshalBinary lays the waiters out compactly: a format byte, their count,
// then per waiter a flags byte, the execution id, the position, the time,
// and the waiter's WaiterRequest, when it has one. Lengths and integers are
// varints; a nil byte slice is told from an empty one. A time is written as
// Unix nanoseconds when that gives it back exactly once its monotonic
// reading is dropped (as any encoding drops it), so the layout of equal
// waiters is equal.
func (ws Waiters) MarshalBinary() ([]byte, error) {
	var out []byte
	err := ws.EncodeChunks(func(p []byte) error { out = append(out, p...); return nil })
	return out, err
}

// UnmarshalBinary reads what MarshalBinary wrote.
func (ws *Waiters) UnmarshalBinary(data []byte) error {
	return ws.DecodeChunks(onePiece(data))
}

// onePiece returns a source of pieces that gives data and then fails.
func onePiece(data []byte) func() ([]byte, error) {
	given := false
	return func() ([]byte, error) {
		if given {
			return nil, errors.New("truncated")
		}
		given = true
		return data, nil
	}
}

// EncodeChunks writes MarshalBinary's layout in pieces of about 1 MiB, cut
// between waiters, calling emit with each (emit may keep a piece only until
// it returns). DecodeChunks reads them back: neither holds the whole layout.
func (ws Waiters) EncodeChunks(emit func([]byte) error) error {
	b := make([]byte, 0, min(chunkSize+4096, 16+len(ws.slots)*48))
	b = append(b, waitersFormat)
	b = binary.AppendUvarint(b, uint64(len(ws.slots)))
	for i := range ws.slots {
		var err error
		if b, err = appendSlot(b, &ws.slots[i]); err != nil {
			return err
		}
		if len(b) >= chunkSize && i < len(ws.slots)-1 {
			if err := emit(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	return emit(b)
}

func appendSlot(b []byte, s *slot) ([]byte, error) {
	t, utc := s.at, true
	var tb []byte
	if s.req != nil && s.req.hasAt {
		at := s.req.at.Round(0)
		if utc = at == time.Unix(0, at.UnixNano()).UTC(); utc {
			t = at.UnixNano()
		} else {
			var err error
			if tb, err = at.MarshalBinary(); err != nil {
				return nil, fmt.Errorf("waiter %s: %w", s.id, err)
			}
		}
	}
	var flags byte
	if utc {
		flags |= waiterUTC
	}
	r := s.req
	if r != nil && r.hasFields() {
		flags |= waiterExtra
	}
	b = append(b, flags)
	b = appendString(b, s.id)
	b = binary.AppendUvarint(b, s.pos)
	if utc {
		b = binary.AppendVarint(b, t)
	} else {
		b = appendBytes(b, tb)
	}
	if flags&waiterExtra == 0 {
		return b, nil
	}
	b = binary.AppendUvarint(b, r.version)
	b = appendBytes(b, r.input)
	b = appendString(b, r.parent)
	b = binary.AppendVarint(b, int64(r.itemIndex))
	b = binary.AppendVarint(b, int64(r.items))
	b = binary.AppendVarint(b, int64(r.concurrency))
	if r.withItems == nil {
		b = binary.AppendUvarint(b, 0)
	} else {
		b = binary.AppendUvarint(b, uint64(len(r.withItems))+1)
		for _, it := range r.withItems {
			b = appendBytes(b, it)
		}
	}
	return b, nil
}

// DecodeChunks reads what EncodeChunks wrote, taking its pieces from next
// (whose pieces it does not keep).
func (ws *Waiters) DecodeChunks(next func() ([]byte, error)) error {
	r := binReader{next: next}
	r.refill()
	if f := r.byte(); f != waitersFormat && r.err == nil {
		return fmt.Errorf("waiters in layout %d, this binary reads %d", f, waitersFormat)
	}
	n := r.uvarint()
	out := make([]slot, 0, min(n, 1<<20)) // (a count read from a file bounds nothing)
	for i := uint64(0); i < n && r.err == nil; i++ {
		r.refill()
		flags := r.byte()
		s := slot{id: r.string(), pos: r.uvarint()}
		var q request
		if flags&waiterUTC != 0 {
			s.at = r.varint()
		} else if tb := r.raw(r.uvarint() - 1); r.err == nil {
			if err := q.at.UnmarshalBinary(tb); err != nil {
				r.err = err
			}
			q.hasAt = true
		}
		if flags&waiterExtra != 0 {
			q.version = r.uvarint()
			q.input = r.bytes()
			q.parent = r.string()
			q.itemIndex, q.items, q.concurrency = int(r.varint()), int(r.varint()), int(r.varint())
			if k := r.uvarint(); k > 0 && r.err == nil {
				if k-1 > uint64(len(r.b)-r.off) { // every item takes at least a byte
					r.err = errors.New("item count beyond the data")
					break
				}
				q.withItems = make([]json.RawMessage, k-1)
				for j := range q.withItems {
					q.withItems[j] = r.bytes()
				}
			}
		}
		if q.hasAt || flags&waiterExtra != 0 {
			s.req = new(request) // (not &q: q would be on the heap for every waiter)
			*s.req = q
		}
		out = append(out, s)
	}
	if r.err == nil && r.off != len(r.b) {
		r.err = fmt.Errorf("%d bytes after the waiters", len(r.b)-r.off)
	}
	if r.err != nil {
		return fmt.Errorf("decode waiters: %w", r.err)
	}
	ws.slots = out
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendBytes writes p's length plus one, or 0 for nil, then p.
func appendBytes(b, p []byte) []byte {
	if p == nil {
		return binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(p))+1)
	return append(b, p...)
}

// binReader reads a binary layout, from pieces that next gives when the
// current one is used up (refill, called between elements); its first error
// sticks and later reads return zero values.
type binReader struct {
	b    []byte
	off  int
	err  error
	next func() ([]byte, error)
}

// refill takes the next piece if the current one is used up.
func (r *binReader) refill() {
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

func (r *binReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("truncated at byte %d reading %s", r.off, what)
	}
}

func (r *binReader) byte() byte {
	if r.err != nil || r.off >= len(r.b) {
		r.fail("a byte")
		return 0
	}
	r.off++
	return r.b[r.off-1]
}

func (r *binReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail("a number")
		return 0
	}
	r.off += n
	return v
}

func (r *binReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.fail("a number")
		return 0
	}
	r.off += n
	return v
}

func (r *binReader) raw(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		r.fail("bytes")
		return nil
	}
	p := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return p
}

func (r *binReader) string() string { return string(r.raw(r.uvarint())) }

// bytes reads what appendBytes wrote, as a copy (nil for nil).
func (r *binReader) bytes() []byte {
	n := r.uvarint()
	if n == 0 || r.err != nil {
		return nil
	}
	return append([]byte{}, r.raw(n-1)...)
}
