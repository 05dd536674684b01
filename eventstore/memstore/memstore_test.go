package memstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newStore(t *testing.T) eventstore.Store {
	s := memstore.New(memstore.Options{})
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// closeStore closes s at the end of a test and reports an error.
func closeStore(tb testing.TB, s *memstore.Store) {
	if err := s.Close(); err != nil {
		tb.Errorf("Close: %v", err)
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, newStore, storetest.Capabilities{
		DensePositions:    true,
		AtomicMultiStream: true,
	})
}

// The wrapper that takes multi-stream appends away (for tests of code that
// must run on KurrentDB) keeps the rest of the contract.
func TestConformanceSingleStream(t *testing.T) {
	storetest.Run(t, func(t *testing.T) eventstore.Store { return storetest.SingleStream(newStore(t)) },
		storetest.Capabilities{DensePositions: true})
}

// The injected clock stamps every event, in UTC and without a monotonic
// reading, so simulations are reproducible.
func TestClock(t *testing.T) {
	t.Parallel()
	zone := time.FixedZone("sim", 2*3600)
	now := time.Date(2030, 1, 2, 3, 4, 5, 6, zone)
	s := memstore.New(memstore.Options{Clock: func() time.Time { return now }})
	defer closeStore(t, s)
	ctx := t.Context()
	if _, err := s.Append(ctx, "execution-1", eventstore.NoStream, storetest.NewEvents("test.a", 2)...); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if _, err := s.Append(ctx, "execution-1", eventstore.Exact(1), storetest.NewEvent("test.b", nil)); err != nil {
		t.Fatal(err)
	}
	evs, err := s.ReadAll(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Time{
		time.Date(2030, 1, 2, 1, 4, 5, 6, time.UTC),
		time.Date(2030, 1, 2, 1, 4, 5, 6, time.UTC),
		time.Date(2030, 1, 2, 1, 5, 5, 6, time.UTC),
	}
	if len(evs) != len(want) {
		t.Fatalf("got %d events, want %d", len(evs), len(want))
	}
	for i, e := range evs {
		if e.Time != want[i] { // == on purpose: same location, no monotonic reading
			t.Errorf("event %d: Time = %#v, want %#v", i, e.Time, want[i])
		}
	}
}

// Re-appending an id with different content is a conflict, not a no-op: a
// writer that reuses an id for another event has a bug the log must not hide.
func TestIdempotencyComparesContent(t *testing.T) {
	t.Parallel()
	s := memstore.New(memstore.Options{})
	defer closeStore(t, s)
	ctx := t.Context()
	e := storetest.NewEvent("test.a", map[string]int{"x": 1})
	res, err := s.Append(ctx, "execution-1", eventstore.NoStream, e)
	if err != nil {
		t.Fatal(err)
	}
	same := e
	if got, err := s.Append(ctx, "execution-1", eventstore.NoStream, same); err != nil || got != res {
		t.Fatalf("re-append of the same event: %+v, %v; want %+v, nil", got, err, res)
	}
	for name, change := range map[string]func(*domain.Envelope){
		"data":   func(e *domain.Envelope) { e.Data = json.RawMessage(`{"x":2}`) },
		"type":   func(e *domain.Envelope) { e.Type = "test.b" },
		"owner":  func(e *domain.Envelope) { e.Owner = domain.OwnerAPI },
		"schema": func(e *domain.Envelope) { e.SchemaVersion = 2 },
	} {
		changed := e
		change(&changed)
		_, err := s.Append(ctx, "execution-1", eventstore.Any, changed)
		if !errors.Is(err, eventstore.ErrIdempotencyConflict) {
			t.Errorf("re-append with different %s: %v, want ErrIdempotencyConflict", name, err)
		}
	}
	if h, _ := s.Head(ctx); h != 1 {
		t.Fatalf("Head = %d after conflicting re-appends, want 1", h)
	}
}

// Benchmark of the append path, for the simulation tests' budget.
func BenchmarkAppend(b *testing.B) {
	s := memstore.New(memstore.Options{})
	defer closeStore(b, s)
	ctx := context.Background()
	for b.Loop() {
		if _, err := s.Append(ctx, "execution-1", eventstore.Any, storetest.NewEvent("test.a", nil)); err != nil {
			b.Fatal(err)
		}
	}
}
