package projections

// The binary layout of a queue's waiters in a snapshot file: a queue may
// hold millions of them, so they are written and read in pieces, apart from
// the snapshot's JSON.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/internal/binlayout"
)

// waitersFormat is the first byte of the waiters' layout. Change it with the
// layout: a snapshot in another layout is then refused, not misread.
const waitersFormat = 1

// Bits of a waiter's flags byte in the waiters' layout.
const (
	waiterUTC      = 1 << iota // EnqueuedAt is UTC: Unix nanoseconds follow (else its MarshalBinary form)
	waiterExtra                // a WaiterRequest follows
	waiterPriority             // a priority follows (a varint), before the request
	waiterTrace                // the request's traceparent follows the WaiterRequest, last
)

// marshalWaiters lays ws out compactly: a format byte, their count, then per
// waiter a flags byte, the execution id, the position, the time, its
// priority when not the default, and the waiter's WaiterRequest, when it
// has one. Lengths and integers are varints;
// a nil byte slice is told from an empty one. A time is written as Unix
// nanoseconds when that gives it back exactly once its monotonic reading is
// dropped (as any encoding drops it), so the layout of equal waiters is equal.
func marshalWaiters(ws domain.Waiters) ([]byte, error) {
	var out []byte
	err := encodeWaiters(ws, func(p []byte) error { out = append(out, p...); return nil })
	return out, err
}

// unmarshalWaiters reads what marshalWaiters wrote.
func unmarshalWaiters(data []byte) (domain.Waiters, error) {
	return decodeWaiters(binlayout.OnePiece(data))
}

// encodeWaiters writes marshalWaiters' layout in pieces of about 1 MiB, cut
// between waiters, calling emit with each (emit may keep a piece only until
// it returns). decodeWaiters reads them back: neither holds the whole layout.
func encodeWaiters(ws domain.Waiters, emit func([]byte) error) error {
	n := ws.Len()
	b := make([]byte, 0, min(binlayout.ChunkSize+4096, 16+n*48))
	b = append(b, waitersFormat)
	b = binary.AppendUvarint(b, uint64(n))
	var err error
	i := 0
	ws.Each(func(w *domain.WaiterSnapshot) bool {
		if b, err = appendWaiter(b, w); err != nil {
			return false
		}
		if i++; len(b) >= binlayout.ChunkSize && i < n {
			if err = emit(b); err != nil {
				return false
			}
			b = b[:0]
		}
		return true
	})
	if err != nil {
		return err
	}
	return emit(b)
}

func appendWaiter(b []byte, w *domain.WaiterSnapshot) ([]byte, error) {
	at := w.EnqueuedAt.Round(0)
	t, utc := at.UnixNano(), at == time.Unix(0, at.UnixNano()).UTC()
	var tb []byte
	if !utc {
		var err error
		if tb, err = at.MarshalBinary(); err != nil {
			return nil, fmt.Errorf("waiter %s: %w", w.Execution, err)
		}
	}
	var flags byte
	if utc {
		flags |= waiterUTC
	}
	r := w.Request
	if r != nil {
		flags |= waiterExtra
		if r.Traceparent != "" {
			flags |= waiterTrace
		}
	}
	if w.Priority != 0 {
		flags |= waiterPriority
	}
	b = append(b, flags)
	b = binlayout.AppendString(b, w.Execution)
	b = binary.AppendUvarint(b, w.Position)
	if utc {
		b = binary.AppendVarint(b, t)
	} else {
		b = binlayout.AppendBytes(b, tb)
	}
	if w.Priority != 0 {
		b = binary.AppendVarint(b, int64(w.Priority))
	}
	if r == nil {
		return b, nil
	}
	b = binary.AppendUvarint(b, r.Version)
	b = binlayout.AppendBytes(b, r.Input)
	b = binlayout.AppendString(b, r.Parent)
	b = binary.AppendVarint(b, int64(r.ItemIndex))
	b = binary.AppendVarint(b, int64(r.Items))
	b = binary.AppendVarint(b, int64(r.Concurrency))
	if r.WithItems == nil {
		b = binary.AppendUvarint(b, 0)
	} else {
		b = binary.AppendUvarint(b, uint64(len(r.WithItems))+1)
		for _, it := range r.WithItems {
			b = binlayout.AppendBytes(b, it)
		}
	}
	if r.Traceparent != "" {
		b = binlayout.AppendString(b, r.Traceparent)
	}
	return b, nil
}

// decodeWaiters reads what encodeWaiters wrote, taking its pieces from next
// (whose pieces it does not keep).
func decodeWaiters(next func() ([]byte, error)) (domain.Waiters, error) {
	r := binlayout.NewReader(next)
	if f := r.Byte(); f != waitersFormat && r.Err() == nil {
		return domain.Waiters{}, fmt.Errorf("waiters in layout %d, this binary reads %d", f, waitersFormat)
	}
	n := r.Uvarint()
	var out domain.Waiters
	out.Grow(int(min(n, 1<<20))) // (a count read from a file bounds nothing)
	var w domain.WaiterSnapshot
	var q domain.WaiterRequest
	for i := uint64(0); i < n && r.Err() == nil; i++ {
		r.Refill()
		flags := r.Byte()
		w = domain.WaiterSnapshot{Execution: r.String(), Position: r.Uvarint()}
		if flags&waiterUTC != 0 {
			w.EnqueuedAt = time.Unix(0, r.Varint()).UTC()
		} else if tb := r.Raw(r.Uvarint() - 1); r.Err() == nil {
			if err := w.EnqueuedAt.UnmarshalBinary(tb); err != nil {
				r.Fail(err)
			}
		}
		if flags&waiterPriority != 0 {
			w.Priority = int(r.Varint())
		}
		if flags&waiterExtra != 0 {
			q = domain.WaiterRequest{Version: r.Uvarint()}
			q.Input = r.Bytes()
			q.Parent = r.String()
			q.ItemIndex, q.Items, q.Concurrency = int(r.Varint()), int(r.Varint()), int(r.Varint())
			if k := r.Uvarint(); k > 0 && r.Err() == nil {
				if k-1 > uint64(r.Left()) { // every item takes at least a byte
					r.Fail(errors.New("item count beyond the data"))
					break
				}
				q.WithItems = make([]json.RawMessage, k-1)
				for j := range q.WithItems {
					q.WithItems[j] = r.Bytes()
				}
			}
			if flags&waiterTrace != 0 {
				q.Traceparent = r.String()
			}
			w.Request = &q
		}
		out.Add(&w)
	}
	if r.Err() == nil && r.Left() != 0 {
		r.Fail(fmt.Errorf("%d bytes after the waiters", r.Left()))
	}
	if r.Err() != nil {
		return domain.Waiters{}, fmt.Errorf("decode waiters: %w", r.Err())
	}
	return out, nil
}
