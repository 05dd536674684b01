package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// The hash chain (eventstore.NextHash), for a store whose KeepsChain is true.

func (s suite) chainTests() []subtest {
	return []subtest{
		{name: "EveryEventLinked", run: s.chainLinked},
		{name: "SameOnEveryRead", run: s.chainSameOnEveryRead},
		{name: "ReplayKeepsChain", run: s.chainReplay},
		{name: "ConcurrentWriters", run: s.chainConcurrent, slow: true},
	}
}

func needChain(t *testing.T, st eventstore.Store) {
	t.Helper()
	if !eventstore.KeepsChain(st) {
		t.Skip("skipped: the backend keeps no hash chain (eventstore.KeepsChain is false)")
	}
}

// requireChained fails unless every event of evs (the log from its start, in
// position order) carries NextHash of the one before, starting after prev.
func requireChained(t *testing.T, what string, prev domain.Hash, evs []domain.Envelope) {
	t.Helper()
	if err := checkChain(prev, evs); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func checkChain(prev domain.Hash, evs []domain.Envelope) error {
	var c eventstore.Chainer
	for i := range evs {
		e := &evs[i]
		if e.Hash.IsZero() {
			return fmt.Errorf("event at position %d has no hash", e.Position)
		}
		if want := c.Next(prev, e); e.Hash != want {
			return fmt.Errorf("event at position %d has hash %s, the chain gives %s", e.Position, e.Hash, want)
		}
		prev = e.Hash
	}
	return nil
}

// Every event's hash chains over the one before, across single appends,
// several events in one append and (where atomic) several streams at once.
func (s suite) chainLinked(t *testing.T, st eventstore.Store) {
	needChain(t, st)
	ctx := testContext(t)
	mustAppend(t, ctx, st, "chain-a", eventstore.NoStream, NewEvent("test.one", map[string]string{"x": "with spaces < & >"}))
	mustAppend(t, ctx, st, "chain-b", eventstore.Any, NewEvents("test.many", 5)...)
	empty := NewEvent("test.empty", nil)
	empty.Data, empty.Metadata = nil, []byte(`{"m":1}`)
	empty.CorrelationID, empty.CausationID, empty.Writer = "corr", "cause", "writer-1"
	mustAppend(t, ctx, st, "chain-a", eventstore.Exact(0), empty)
	if s.caps.AtomicMultiStream {
		if _, err := st.AppendMulti(ctx,
			eventstore.StreamAppend{Stream: "chain-c", Expected: eventstore.NoStream, Events: NewEvents("test.c", 2)},
			eventstore.StreamAppend{Stream: "chain-a", Expected: eventstore.Exact(1), Events: NewEvents("test.a", 3)},
		); err != nil {
			t.Fatalf("AppendMulti: %v", err)
		}
	}
	evs := readAll(t, ctx, st)
	requireChained(t, "the log read with ReadAll", domain.Hash{}, evs)
}

// ReadStream, ReadAll and Subscribe give every event the same hash.
func (s suite) chainSameOnEveryRead(t *testing.T, st eventstore.Store) {
	needChain(t, st)
	ctx := testContext(t)
	for i := range 4 {
		mustAppend(t, ctx, st, fmt.Sprintf("chain-%d", i%2), eventstore.Any, NewEvents("test.e", 3)...)
	}
	all := readAll(t, ctx, st)
	byID := map[[16]byte]domain.Hash{}
	for _, e := range all {
		byID[e.ID] = e.Hash
	}
	for _, stream := range []string{"chain-0", "chain-1"} {
		for _, e := range readStreamAll(t, ctx, st, stream) {
			if byID[e.ID] != e.Hash {
				t.Fatalf("ReadStream gives event %s hash %s, ReadAll %s", e.ID, e.Hash, byID[e.ID])
			}
		}
	}
	got := subscribeN(t, ctx, st, len(all))
	for _, e := range got {
		if byID[e.ID] != e.Hash {
			t.Fatalf("Subscribe gives event %s hash %s, ReadAll %s", e.ID, e.Hash, byID[e.ID])
		}
	}
}

// subscribeN collects the first n events from position 0 on.
func subscribeN(t *testing.T, ctx context.Context, st eventstore.Store, n int) []domain.Envelope {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var got []domain.Envelope
	done := fmt.Errorf("done")
	err := st.Subscribe(ctx, 0, eventstore.Filter{}, func(b []domain.Envelope) error {
		got = append(got, b...)
		if len(got) >= n {
			return done
		}
		return nil
	})
	if err != done {
		t.Fatalf("Subscribe: %v after %d of %d events", err, len(got), n)
	}
	return got
}

// A re-append (idempotent) neither writes nor changes any hash.
func (s suite) chainReplay(t *testing.T, st eventstore.Store) {
	needChain(t, st)
	ctx := testContext(t)
	evs := NewEvents("test.r", 3)
	mustAppend(t, ctx, st, "chain-r", eventstore.NoStream, evs...)
	before := readAll(t, ctx, st)
	mustAppend(t, ctx, st, "chain-r", eventstore.NoStream, evs...)
	mustAppend(t, ctx, st, "chain-r", eventstore.Any, NewEvent("test.after", nil))
	after := readAll(t, ctx, st)
	requireSameEvents(t, "the log after a re-append", before, after[:len(before)])
	requireChained(t, "the log after a re-append and one more event", domain.Hash{}, after)
}

// Concurrent writers on several streams still give one unbroken chain.
func (s suite) chainConcurrent(t *testing.T, st eventstore.Store) {
	needChain(t, st)
	ctx := testContext(t)
	if _, err := writeConcurrently(ctx, st, 8, 40, func(w int) string { return fmt.Sprintf("chain-w%d", w%3) }, nil); err != nil {
		t.Fatal(err)
	}
	requireChained(t, "the log of 8 concurrent writers", domain.Hash{}, readAll(t, ctx, st))
}
