package storetest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// inputTests: the limits of package eventstore are the contract. A malformed
// stream name is ErrInvalidStream; an event without type or id, with an unknown
// owner, or with over-long fields is ErrInvalidEvent; an event over
// MaxEventSize, or an append over MaxAppendBytes, is ErrEventTooLarge; an empty
// append, one over MaxAppendEvents, or an AppendMulti naming a stream twice is
// ErrInvalidEvent. One bad event refuses the whole append and nothing is
// stored. Values right at the limits are accepted.
func (s suite) inputTests() []subtest {
	return []subtest{
		{name: "BadStreamName", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			mustAppend(t, ctx, st, "execution-ok", eventstore.NoStream, NewEvent("test.ok", nil))
			for name, stream := range map[string]string{
				"empty":      "",
				"space":      "execution 1",
				"leading":    " execution-1",
				"tab":        "execution-\t1",
				"newline":    "execution-1\n",
				"nul":        "execution-\x001",
				"del":        "execution-\x7f",
				"non-ascii":  "exécution-1",
				"too long":   strings.Repeat("s", eventstore.MaxStreamLen+1),
				"very long":  strings.Repeat("s", 1<<16),
				"only space": " ",
			} {
				t.Run(name, func(t *testing.T) {
					before := snapshot(t, ctx, st)
					_, err := st.Append(ctx, stream, eventstore.Any, NewEvent("test.bad", nil))
					requireErrorIs(t, err, eventstore.ErrInvalidStream, "Append to stream "+name)
					s.requireUnchanged(t, ctx, st, before, "an Append to a malformed stream")
					if s.caps.AtomicMultiStream {
						_, err = st.AppendMulti(ctx,
							eventstore.StreamAppend{Stream: "execution-good", Expected: eventstore.Any, Events: NewEvents("test.good", 1)},
							eventstore.StreamAppend{Stream: stream, Expected: eventstore.Any, Events: NewEvents("test.bad", 1)},
						)
						requireErrorIs(t, err, eventstore.ErrInvalidStream, "AppendMulti with stream "+name)
						s.requireUnchanged(t, ctx, st, before, "an AppendMulti with a malformed stream")
					}
				})
			}
			// Right at the limit, and every printable ASCII byte but space.
			var printable strings.Builder
			for c := byte('!'); c <= '~'; c++ {
				printable.WriteByte(c)
			}
			for _, stream := range []string{strings.Repeat("s", eventstore.MaxStreamLen), printable.String(), "x"} {
				mustAppend(t, ctx, st, stream, eventstore.NoStream, NewEvent("test.edge", nil))
				if got := readStreamAll(t, ctx, st, stream); len(got) != 1 || got[0].Stream != stream {
					t.Fatalf("stream %q: read back %d events", stream, len(got))
				}
			}
		}},
		{name: "BadEvent", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			mustAppend(t, ctx, st, "execution-ok", eventstore.NoStream, NewEvent("test.ok", nil))
			long := strings.Repeat("c", eventstore.MaxCorrelationLen+1)
			cases := map[string]func(e *domain.Envelope){
				"no type":              func(e *domain.Envelope) { e.Type = "" },
				"type too long":        func(e *domain.Envelope) { e.Type = strings.Repeat("t", eventstore.MaxTypeLen+1) },
				"no id":                func(e *domain.Envelope) { e.ID = uuid.UUID{} },
				"no owner":             func(e *domain.Envelope) { e.Owner = "" },
				"unknown owner":        func(e *domain.Envelope) { e.Owner = "admin" },
				"owner case":           func(e *domain.Envelope) { e.Owner = "Executor" },
				"correlation too long": func(e *domain.Envelope) { e.CorrelationID = long },
				"causation too long":   func(e *domain.Envelope) { e.CausationID = long },
				"writer too long":      func(e *domain.Envelope) { e.Writer = long },
			}
			for name, spoil := range cases {
				t.Run(name, func(t *testing.T) {
					s.requireRefused(t, ctx, st, eventstore.ErrInvalidEvent, spoil)
				})
			}
		}},
		{name: "EventTooLarge", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			mustAppend(t, ctx, st, "execution-ok", eventstore.NoStream, NewEvent("test.ok", nil))
			t.Run("data", func(t *testing.T) {
				s.requireRefused(t, ctx, st, eventstore.ErrEventTooLarge, func(e *domain.Envelope) {
					e.Data = jsonString(eventstore.MaxEventSize + 1)
				})
			})
			t.Run("data plus metadata", func(t *testing.T) {
				s.requireRefused(t, ctx, st, eventstore.ErrEventTooLarge, func(e *domain.Envelope) {
					e.Data = jsonString(eventstore.MaxEventSize / 2)
					e.Metadata = jsonString(eventstore.MaxEventSize/2 + 1)
				})
			})
			t.Run("at the limit", func(t *testing.T) {
				e := NewEvent("test.big", jsonString(eventstore.MaxEventSize-100))
				e.Metadata = jsonString(100)
				mustAppend(t, ctx, st, "execution-big", eventstore.NoStream, e)
				requireWritten(t, "an event of exactly MaxEventSize bytes", []domain.Envelope{e}, readStreamAll(t, ctx, st, "execution-big"))
			})
		}},
		{name: "BadAppend", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			mustAppend(t, ctx, st, "execution-ok", eventstore.NoStream, NewEvent("test.ok", nil))
			type call func() error
			appendN := func(evs []domain.Envelope) call {
				return func() error {
					_, err := st.Append(ctx, "execution-many", eventstore.Any, evs...)
					return err
				}
			}
			tooMany := make([]domain.Envelope, eventstore.MaxAppendEvents+1)
			for i := range tooMany {
				tooMany[i] = NewEvent("test.many", json.RawMessage(`0`))
			}
			chunk := eventstore.MaxEventSize - 10
			tooBig := make([]domain.Envelope, eventstore.MaxAppendBytes/chunk+1)
			shared := jsonString(chunk) // one buffer for all: the test stays small
			for i := range tooBig {
				tooBig[i] = NewEvent("test.big", nil)
				tooBig[i].Data = shared
			}
			cases := []struct {
				name string
				want error
				call call
			}{
				{"no events", eventstore.ErrInvalidEvent, appendN(nil)},
				{"too many events", eventstore.ErrInvalidEvent, appendN(tooMany)},
				{"too many bytes", eventstore.ErrEventTooLarge, appendN(tooBig)},
				{"AppendMulti of nothing", eventstore.ErrInvalidEvent, func() error {
					_, err := st.AppendMulti(ctx)
					return err
				}},
				{"AppendMulti with a stream without events", eventstore.ErrInvalidEvent, func() error {
					_, err := st.AppendMulti(ctx,
						eventstore.StreamAppend{Stream: "execution-a", Expected: eventstore.Any, Events: NewEvents("test.a", 1)},
						eventstore.StreamAppend{Stream: "execution-b", Expected: eventstore.Any},
					)
					return err
				}},
				{"AppendMulti naming a stream twice", eventstore.ErrInvalidEvent, func() error {
					_, err := st.AppendMulti(ctx,
						eventstore.StreamAppend{Stream: "execution-a", Expected: eventstore.Any, Events: NewEvents("test.a", 1)},
						eventstore.StreamAppend{Stream: "execution-a", Expected: eventstore.Any, Events: NewEvents("test.a", 1)},
					)
					return err
				}},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					before := snapshot(t, ctx, st)
					requireErrorIs(t, c.call(), c.want, c.name)
					s.requireUnchanged(t, ctx, st, before, "a refused append ("+c.name+")")
				})
			}
			// Right at the event-count limit.
			atLimit := tooMany[:eventstore.MaxAppendEvents]
			res := mustAppend(t, ctx, st, "execution-many", eventstore.NoStream, atLimit...)
			if res.Version != eventstore.MaxAppendEvents-1 {
				t.Fatalf("append of MaxAppendEvents events ended at version %d, want %d", res.Version, eventstore.MaxAppendEvents-1)
			}
		}},
	}
}

// requireRefused appends three events, the middle one spoiled, to a new stream
// (with Append and, if the backend has it, AppendMulti) and checks the error
// and that nothing is stored.
func (s suite) requireRefused(t *testing.T, ctx context.Context, st eventstore.Store, want error, spoil func(*domain.Envelope)) {
	t.Helper()
	evs := NewEvents("test.batch", 3)
	spoil(&evs[1])
	before := snapshot(t, ctx, st)
	_, err := st.Append(ctx, "execution-refused", eventstore.Any, evs...)
	requireErrorIs(t, err, want, "Append")
	s.requireUnchanged(t, ctx, st, before, "a refused Append")
	requireStreamMissing(t, ctx, st, "execution-refused")
	if s.caps.AtomicMultiStream {
		_, err = st.AppendMulti(ctx,
			eventstore.StreamAppend{Stream: "execution-good", Expected: eventstore.Any, Events: NewEvents("test.good", 2)},
			eventstore.StreamAppend{Stream: "execution-refused", Expected: eventstore.Any, Events: evs},
		)
		requireErrorIs(t, err, want, "AppendMulti")
		s.requireUnchanged(t, ctx, st, before, "a refused AppendMulti")
		requireStreamMissing(t, ctx, st, "execution-good")
	}
	// The good events of the refused batch were not stored: they append.
	mustAppend(t, ctx, st, "execution-refused-"+uuid.NewString()[:8], eventstore.NoStream, evs[0], evs[2])
}

// jsonString returns a JSON string of exactly n bytes (n >= 2).
func jsonString(n int) json.RawMessage {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'x'
	}
	b[0], b[n-1] = '"', '"'
	return b
}
