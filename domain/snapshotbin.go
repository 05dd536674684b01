package domain

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/turnstile/turnstile/internal/binlayout"
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
	return ws.DecodeChunks(binlayout.OnePiece(data))
}

// EncodeChunks writes MarshalBinary's layout in pieces of about 1 MiB, cut
// between waiters, calling emit with each (emit may keep a piece only until
// it returns). DecodeChunks reads them back: neither holds the whole layout.
func (ws Waiters) EncodeChunks(emit func([]byte) error) error {
	b := make([]byte, 0, min(binlayout.ChunkSize+4096, 16+len(ws.slots)*48))
	b = append(b, waitersFormat)
	b = binary.AppendUvarint(b, uint64(len(ws.slots)))
	for i := range ws.slots {
		var err error
		if b, err = appendSlot(b, &ws.slots[i]); err != nil {
			return err
		}
		if len(b) >= binlayout.ChunkSize && i < len(ws.slots)-1 {
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
	b = binlayout.AppendString(b, s.id)
	b = binary.AppendUvarint(b, s.pos)
	if utc {
		b = binary.AppendVarint(b, t)
	} else {
		b = binlayout.AppendBytes(b, tb)
	}
	if flags&waiterExtra == 0 {
		return b, nil
	}
	b = binary.AppendUvarint(b, r.version)
	b = binlayout.AppendBytes(b, r.input)
	b = binlayout.AppendString(b, r.parent)
	b = binary.AppendVarint(b, int64(r.itemIndex))
	b = binary.AppendVarint(b, int64(r.items))
	b = binary.AppendVarint(b, int64(r.concurrency))
	if r.withItems == nil {
		b = binary.AppendUvarint(b, 0)
	} else {
		b = binary.AppendUvarint(b, uint64(len(r.withItems))+1)
		for _, it := range r.withItems {
			b = binlayout.AppendBytes(b, it)
		}
	}
	return b, nil
}

// DecodeChunks reads what EncodeChunks wrote, taking its pieces from next
// (whose pieces it does not keep).
func (ws *Waiters) DecodeChunks(next func() ([]byte, error)) error {
	r := binlayout.NewReader(next)
	if f := r.Byte(); f != waitersFormat && r.Err() == nil {
		return fmt.Errorf("waiters in layout %d, this binary reads %d", f, waitersFormat)
	}
	n := r.Uvarint()
	out := make([]slot, 0, min(n, 1<<20)) // (a count read from a file bounds nothing)
	for i := uint64(0); i < n && r.Err() == nil; i++ {
		r.Refill()
		flags := r.Byte()
		s := slot{id: r.String(), pos: r.Uvarint()}
		var q request
		if flags&waiterUTC != 0 {
			s.at = r.Varint()
		} else if tb := r.Raw(r.Uvarint() - 1); r.Err() == nil {
			if err := q.at.UnmarshalBinary(tb); err != nil {
				r.Fail(err)
			}
			q.hasAt = true
		}
		if flags&waiterExtra != 0 {
			q.version = r.Uvarint()
			q.input = r.Bytes()
			q.parent = r.String()
			q.itemIndex, q.items, q.concurrency = int(r.Varint()), int(r.Varint()), int(r.Varint())
			if k := r.Uvarint(); k > 0 && r.Err() == nil {
				if k-1 > uint64(r.Left()) { // every item takes at least a byte
					r.Fail(errors.New("item count beyond the data"))
					break
				}
				q.withItems = make([]json.RawMessage, k-1)
				for j := range q.withItems {
					q.withItems[j] = r.Bytes()
				}
			}
		}
		if q.hasAt || flags&waiterExtra != 0 {
			s.req = new(request) // (not &q: q would be on the heap for every waiter)
			*s.req = q
		}
		out = append(out, s)
	}
	if r.Err() == nil && r.Left() != 0 {
		r.Fail(fmt.Errorf("%d bytes after the waiters", r.Left()))
	}
	if r.Err() != nil {
		return fmt.Errorf("decode waiters: %w", r.Err())
	}
	ws.slots = out
	return nil
}
