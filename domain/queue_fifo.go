// One key value's waiting list: a FIFO of compact slots (what a waiter's
// request said, its position and priority), with the index that finds a
// waiter by id. The grant order is priority first, then request order.

package domain

import (
	"bytes"
	"encoding/json"
	"time"
)

// fifo is a queue of waiters that supports removal from the middle in O(1)
// (tombstones, compacted as the head advances). A waiter's place in items is
// kept in the Queues' locator, which the fifo's methods are given.
type fifo struct {
	items []slot // items[head:] are live or tombstoned ("" id)
	head  int
	live  int
	mixed bool // a waiter of another priority than DefaultPriority was pushed since the fifo was last empty
}

// slot is one waiter, laid out small: a million of them wait in the bench.
// Its key is its KeyQueue's. It carries what its execution.requested event
// says beyond the action (the queue's ref), so that the execution can be
// rebuilt as that event left it (Queues.Waiting) and a fold need not keep a
// whole aggregate per waiter.
type slot struct {
	id   string
	pos  uint64
	at   int64    // the request's log time in Unix nanoseconds, when it is UTC and req.at is unset
	req  *request // nil when the request says nothing more (no input, not a child) and its time is UTC
	prio uint8    // the request's priority, 0 for DefaultPriority
}

// request is what a waiter's execution.requested carries besides its action
// and time, when there is any.
type request struct {
	input       []byte
	parent      string
	itemIndex   int
	items       int // a with_items parent is never queued; a log may still say otherwise
	concurrency int
	withItems   []json.RawMessage
	traceparent string    // the request's W3C trace context (trace.go), or ""
	version     uint64    // of the requested event in its stream (0 on any log the executor wrote)
	at          time.Time // the log time, when it is not UTC (or has a monotonic reading)
	hasAt       bool
}

// newSlot lays out the waiter of execution id requested by e at env.
func newSlot(id string, env *Envelope, e ExecutionRequested) slot {
	s := slot{id: id, pos: env.Position}
	if e.Priority != DefaultPriority && e.Priority >= 0 && e.Priority <= MaxPriority {
		s.prio = uint8(e.Priority)
	}
	var r request
	if t := env.Time; t == time.Unix(0, t.UnixNano()).UTC() {
		s.at = t.UnixNano()
	} else {
		r.at, r.hasAt = t, true
	}
	r.input, r.parent, r.itemIndex, r.items, r.concurrency, r.withItems, r.version =
		e.Input, e.Parent, e.ItemIndex, e.Items, e.Concurrency, e.WithItems, env.Version
	if len(env.Metadata) > 0 && bytes.Contains(env.Metadata, []byte(`"traceparent"`)) {
		r.traceparent = TraceparentOf(env.Metadata)
	}
	if r.hasAt || r.hasFields() {
		s.req = new(request) // (not &r: r would be on the heap for every waiter)
		*s.req = r
	}
	return s
}

// hasFields reports whether r holds more than a time.
func (r *request) hasFields() bool {
	return r.input != nil || r.parent != "" || r.itemIndex != 0 || r.items != 0 || r.concurrency != 0 ||
		r.withItems != nil || r.version != 0 || r.traceparent != ""
}

// time returns the waiter's log time of request.
func (s *slot) time() time.Time {
	if s.req != nil && s.req.hasAt {
		return s.req.at
	}
	return time.Unix(0, s.at).UTC()
}

func (s *slot) waiter(key string) Waiter {
	return Waiter{Execution: s.id, Key: key, Position: s.pos, EnqueuedAt: s.time(), Priority: s.priority()}
}

// priority returns the waiter's priority, 1..4.
func (s *slot) priority() int { return PriorityOf(int(s.prio)) }

// execution rebuilds the waiter's execution as its requested event left it.
func (s *slot) execution(ref string) *Execution {
	x := NewExecution(s.id)
	e := ExecutionRequested{Action: ref}
	var version uint64
	if r := s.req; r != nil {
		e.Input, e.Parent, e.ItemIndex, e.Items, e.Concurrency, e.WithItems =
			r.input, r.parent, r.itemIndex, r.items, r.concurrency, r.withItems
		version = r.version
	}
	e.Priority = int(s.prio)
	x.Apply(e, version, s.time())
	if s.req != nil {
		x.SetTraceparent(s.req.traceparent)
	}
	return x
}

func (f *fifo) push(kq *KeyQueue, s slot, where *locator) {
	f.items = append(f.items, s)
	f.live++
	if s.prio != 0 {
		f.mixed = true
	}
	where.wait(s.id, kq, len(f.items)-1)
}

// remove drops the waiter at items[i]; the caller has updated where.
func (f *fifo) remove(kq *KeyQueue, i int, where *locator) {
	f.items[i] = slot{}
	f.live--
	f.skip(kq, where)
}

func (f *fifo) skip(kq *KeyQueue, where *locator) {
	for f.head < len(f.items) && f.items[f.head].id == "" {
		f.head++
	}
	if f.head > 1024 && f.head*2 > len(f.items) {
		// Renumber the entries while the slots are where they say, then
		// move the slots.
		where.waiting.Renumber(kq, f.head, len(f.items), f.head)
		n := copy(f.items, f.items[f.head:])
		clear(f.items[n:])
		f.items = f.items[:n]
		f.head = 0
	}
	if f.live == 0 {
		f.items, f.head, f.mixed = f.items[:0], 0, false
	}
}

// first returns the waiter to grant first: the earliest of the highest
// priority (the head, when every waiter has the default priority).
func (f *fifo) first() (*slot, bool) {
	if !f.mixed {
		return f.peek()
	}
	var best *slot
	for i := f.head; i < len(f.items); i++ {
		if s := &f.items[i]; s.id != "" && (best == nil || s.priority() < best.priority()) {
			if best = s; best.priority() == MinPriority {
				break
			}
		}
	}
	return best, best != nil
}

// firstSeen is first among the waiters requested before position seen (0:
// all of them); a later waiter is returned only when there is no other,
// as the head of the FIFO.
func (f *fifo) firstSeen(seen uint64) (*slot, bool) {
	if !f.mixed || seen == 0 {
		return f.first()
	}
	var best *slot
	for i := f.head; i < len(f.items); i++ {
		s := &f.items[i]
		if s.id == "" || s.pos >= seen {
			continue
		}
		if best == nil || s.priority() < best.priority() {
			best = s
		}
	}
	if best == nil {
		return f.peek()
	}
	return best, true
}

// ordered calls fn with the waiters in grant order (priority, then request
// order) until fn returns false.
func (f *fifo) ordered(fn func(*slot) bool) {
	if !f.mixed {
		f.each(fn)
		return
	}
	for p := MinPriority; p <= MaxPriority; p++ {
		stop := false
		f.each(func(s *slot) bool {
			if s.priority() != p {
				return true
			}
			if !fn(s) {
				stop = true
				return false
			}
			return true
		})
		if stop {
			return
		}
	}
}

func (f *fifo) peek() (*slot, bool) {
	if f.live == 0 {
		return nil, false
	}
	return &f.items[f.head], true
}

func (f *fifo) each(fn func(*slot) bool) {
	for i := f.head; i < len(f.items); i++ {
		if s := &f.items[i]; s.id != "" && !fn(s) {
			return
		}
	}
}
