package storetest

import (
	"errors"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// idempotencyTests: re-appending events whose ids are stored in the stream, in
// the same order, returns the original AppendResult and stores nothing, whatever
// the expected version says now (stale, or even current). Partial overlap, the
// same ids in another order or another stream, or an id named twice in one
// batch, is refused (ErrIdempotencyConflict; ErrInvalidEvent is also accepted
// for the id named twice) and stores nothing. The same rules hold for AppendMulti.
func (s suite) idempotencyTests() []subtest {
	return []subtest{
		{name: "SameBatchAgain", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			const stream = "execution-idem"
			mustAppend(t, ctx, st, "execution-before", eventstore.NoStream, NewEvents("test.x", 2)...)
			batch := NewEvents("test.idem", 3)
			first := mustAppend(t, ctx, st, stream, eventstore.NoStream, batch...)
			for _, expected := range []eventstore.ExpectedVersion{
				eventstore.NoStream, // what the writer used the first time, now stale
				eventstore.Any,
				eventstore.StreamExists,
				eventstore.Exact(2), // current: would append duplicates if ids were ignored
				eventstore.Exact(0), // stale
			} {
				before := snapshot(t, ctx, st)
				res, err := st.Append(ctx, stream, expected, batch...)
				if err != nil {
					t.Fatalf("re-append of a stored batch with expected %s: %v, want the original result", expected, err)
				}
				if res != first {
					t.Fatalf("re-append with expected %s returned %+v, want the original %+v", expected, res, first)
				}
				s.requireUnchanged(t, ctx, st, before, "a re-append with expected "+expected.String())
			}
			// After other appends to the stream, the old batch still re-appends.
			mustAppend(t, ctx, st, stream, eventstore.Exact(2), NewEvents("test.later", 2)...)
			before := snapshot(t, ctx, st)
			res, err := st.Append(ctx, stream, eventstore.NoStream, batch...)
			if err != nil || res != first {
				t.Fatalf("re-append after later appends: %+v, %v; want %+v, nil", res, err, first)
			}
			s.requireUnchanged(t, ctx, st, before, "a re-append after later appends")
		}},
		{name: "SingleEventAgain", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			e := NewEvent("test.one", map[string]string{"k": "v"})
			first := mustAppend(t, ctx, st, "queue-q", eventstore.Any, e)
			mustAppend(t, ctx, st, "queue-q", eventstore.Any, NewEvent("test.two", nil))
			before := snapshot(t, ctx, st)
			res, err := st.Append(ctx, "queue-q", eventstore.Any, e)
			if err != nil || res != first {
				t.Fatalf("re-append of one stored event: %+v, %v; want %+v, nil", res, err, first)
			}
			s.requireUnchanged(t, ctx, st, before, "a re-append of one event")
		}},
		{name: "PartialOverlap", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			const stream = "execution-overlap"
			stored := NewEvents("test.stored", 2)
			mustAppend(t, ctx, st, stream, eventstore.NoStream, stored...)
			fresh := NewEvent("test.fresh", nil)
			for name, batch := range map[string][]domain.Envelope{
				"old then new":  {stored[1], fresh},
				"new then old":  {fresh, stored[0]},
				"superset":      {stored[0], stored[1], fresh},
				"reordered":     {stored[1], stored[0]},
				"gap in middle": {stored[0], fresh, stored[1]},
			} {
				before := snapshot(t, ctx, st)
				_, err := st.Append(ctx, stream, eventstore.Any, batch...)
				requireErrorIs(t, err, eventstore.ErrIdempotencyConflict, "append of stored ids "+name)
				s.requireUnchanged(t, ctx, st, before, "a refused partial re-append ("+name+")")
			}
			// The fresh event was never stored: it appends fine on its own.
			mustAppend(t, ctx, st, stream, eventstore.Exact(1), fresh)
		}},
		{name: "SameIDOtherContent", run: func(t *testing.T, st eventstore.Store) {
			// A retry must be the same event: the same id with another
			// payload, type or writer is a conflict, never a silent success.
			ctx := testContext(t)
			const stream = "execution-content"
			e := NewEvent("test.original", map[string]string{"k": "v"})
			mustAppend(t, ctx, st, stream, eventstore.NoStream, e)
			for name, change := range map[string]func(*domain.Envelope){
				"data":   func(x *domain.Envelope) { x.Data = []byte(`{"k":"other"}`) },
				"type":   func(x *domain.Envelope) { x.Type = "test.other" },
				"writer": func(x *domain.Envelope) { x.Writer = "someone-else" },
			} {
				other := e
				change(&other)
				before := snapshot(t, ctx, st)
				_, err := st.Append(ctx, stream, eventstore.Any, other)
				requireErrorIs(t, err, eventstore.ErrIdempotencyConflict, "re-append of a stored id with other "+name)
				s.requireUnchanged(t, ctx, st, before, "a re-append with other "+name)
			}
		}},
		{name: "SameIDOtherStream", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			e := NewEvent("test.moved", nil)
			mustAppend(t, ctx, st, "execution-home", eventstore.NoStream, e)
			before := snapshot(t, ctx, st)
			_, err := st.Append(ctx, "execution-elsewhere", eventstore.Any, e)
			requireErrorIs(t, err, eventstore.ErrIdempotencyConflict, "append of a stored id to another stream")
			s.requireUnchanged(t, ctx, st, before, "an append of a stored id to another stream")
			requireStreamMissing(t, ctx, st, "execution-elsewhere")
		}},
		{name: "SameIDTwiceInBatch", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			e := NewEvent("test.twice", nil)
			other := NewEvent("test.other", nil)
			_, err := st.Append(ctx, "execution-twice", eventstore.Any, e, other, e)
			if !errors.Is(err, eventstore.ErrIdempotencyConflict) && !errors.Is(err, eventstore.ErrInvalidEvent) {
				t.Fatalf("append naming one id twice: %v, want ErrIdempotencyConflict or ErrInvalidEvent", err)
			}
			s.requireUnchanged(t, ctx, st, logState{}, "an append naming one id twice")
			requireStreamMissing(t, ctx, st, "execution-twice")
		}},
		{name: "Multi/SameBatchAgain", run: func(t *testing.T, st eventstore.Store) {
			s.needAtomicMulti(t)
			ctx := testContext(t)
			batch := []eventstore.StreamAppend{
				{Stream: "execution-m1", Expected: eventstore.NoStream, Events: NewEvents("test.m1", 2)},
				{Stream: "queue-m2", Expected: eventstore.NoStream, Events: NewEvents("test.m2", 1)},
			}
			first, err := st.AppendMulti(ctx, batch...)
			if err != nil {
				t.Fatalf("AppendMulti: %v", err)
			}
			mustAppend(t, ctx, st, "queue-m2", eventstore.Exact(0), NewEvent("test.after", nil))
			before := snapshot(t, ctx, st)
			res, err := st.AppendMulti(ctx, batch...) // expectations now stale
			if err != nil || res != first {
				t.Fatalf("re-append of a stored AppendMulti batch: %+v, %v; want %+v, nil", res, err, first)
			}
			s.requireUnchanged(t, ctx, st, before, "a re-append of an AppendMulti batch")
		}},
		{name: "Multi/PartialOverlap", run: func(t *testing.T, st eventstore.Store) {
			s.needAtomicMulti(t)
			ctx := testContext(t)
			stored := NewEvents("test.stored", 2)
			mustAppend(t, ctx, st, "execution-m1", eventstore.NoStream, stored...)
			before := snapshot(t, ctx, st)
			_, err := st.AppendMulti(ctx,
				eventstore.StreamAppend{Stream: "execution-m1", Expected: eventstore.Any, Events: stored},
				eventstore.StreamAppend{Stream: "queue-m2", Expected: eventstore.Any, Events: NewEvents("test.new", 1)},
			)
			requireErrorIs(t, err, eventstore.ErrIdempotencyConflict, "AppendMulti of stored and new events")
			s.requireUnchanged(t, ctx, st, before, "a refused partial AppendMulti re-append")
			requireStreamMissing(t, ctx, st, "queue-m2")
		}},
	}
}
