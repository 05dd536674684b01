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

// MarshalBinary lays the waiters out compactly: a format byte, their count,
// then per waiter a flags byte, the execution id, the position, the time,
// and the waiter's Request, when it has one.
// Lengths and integers are varints; a nil byte slice is told from an empty one.
func (ws Waiters) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(ws)*48)
	b = append(b, waitersFormat)
	b = binary.AppendUvarint(b, uint64(len(ws)))
	for i := range ws {
		w := &ws[i]
		var flags byte
		utc := w.EnqueuedAt == time.Unix(0, w.EnqueuedAt.UnixNano()).UTC()
		if utc {
			flags |= waiterUTC
		}
		extra := w.Request != nil
		if extra {
			flags |= waiterExtra
		}
		b = append(b, flags)
		b = appendString(b, w.Execution)
		b = binary.AppendUvarint(b, w.Position)
		if utc {
			b = binary.AppendVarint(b, w.EnqueuedAt.UnixNano())
		} else {
			t, err := w.EnqueuedAt.MarshalBinary()
			if err != nil {
				return nil, fmt.Errorf("waiter %s: %w", w.Execution, err)
			}
			b = appendBytes(b, t)
		}
		if !extra {
			continue
		}
		q := w.Request
		b = binary.AppendUvarint(b, q.Version)
		b = appendBytes(b, q.Input)
		b = appendString(b, q.Parent)
		b = binary.AppendVarint(b, int64(q.ItemIndex))
		b = binary.AppendVarint(b, int64(q.Items))
		b = binary.AppendVarint(b, int64(q.Concurrency))
		if q.WithItems == nil {
			b = binary.AppendUvarint(b, 0)
		} else {
			b = binary.AppendUvarint(b, uint64(len(q.WithItems))+1)
			for _, it := range q.WithItems {
				b = appendBytes(b, it)
			}
		}
	}
	return b, nil
}

// UnmarshalBinary reads what MarshalBinary wrote.
func (ws *Waiters) UnmarshalBinary(data []byte) error {
	r := binReader{b: data}
	if f := r.byte(); f != waitersFormat {
		return fmt.Errorf("waiters in layout %d, this binary reads %d", f, waitersFormat)
	}
	n := r.uvarint()
	if r.err == nil && n > uint64(len(data)) { // every waiter takes at least a byte
		r.err = errors.New("waiter count beyond the data")
	}
	out := make(Waiters, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		var w WaiterSnapshot
		flags := r.byte()
		w.Execution = r.string()
		w.Position = r.uvarint()
		if flags&waiterUTC != 0 {
			w.EnqueuedAt = time.Unix(0, r.varint()).UTC()
		} else if t := r.bytes(); r.err == nil {
			if err := w.EnqueuedAt.UnmarshalBinary(t); err != nil {
				r.err = err
			}
		}
		if flags&waiterExtra != 0 {
			w.Request = r.request()
		}
		out = append(out, w)
	}
	if r.err == nil && r.off != len(data) {
		r.err = fmt.Errorf("%d bytes after the waiters", len(data)-r.off)
	}
	if r.err != nil {
		return fmt.Errorf("decode waiters: %w", r.err)
	}
	*ws = out
	return nil
}

// request reads a waiter's WaiterRequest.
func (r *binReader) request() *WaiterRequest {
	w := &WaiterRequest{}
	w.Version = r.uvarint()
	w.Input = json.RawMessage(r.bytes())
	w.Parent = r.string()
	w.ItemIndex, w.Items, w.Concurrency = int(r.varint()), int(r.varint()), int(r.varint())
	if k := r.uvarint(); k > 0 && r.err == nil {
		if k-1 > uint64(len(r.b)-r.off) { // every item takes at least a byte
			r.err = errors.New("item count beyond the data")
			return w
		}
		w.WithItems = make([]json.RawMessage, k-1)
		for j := range w.WithItems {
			w.WithItems[j] = r.bytes()
		}
	}
	return w
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

// binReader reads a binary layout; its first error sticks and later reads
// return zero values.
type binReader struct {
	b   []byte
	off int
	err error
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
