package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/clock"
	"github.com/turnstile/turnstile/services/worker"
)

// TestIdleWorkerLearnsItsLossPastATrim: an idle worker declared lost, whose
// verdict a trim archived before the worker looked (the trim keeps its
// stream, but from the live log's start on, so nothing past the version the
// worker knows is left to read), still learns it at its next look and
// registers a new incarnation, instead of waiting for ever as the old one.
func TestIdleWorkerLearnsItsLossPastATrim(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { _ = store.Close() })
	clk := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	n := 0
	w, err := worker.New(worker.Config{ID: "w1", Store: store, Logger: quiet(), Clock: clk, Heartbeat: 2 * time.Second, MarkEvery: 4 * time.Second,
		NewIncarnation: func() string { n++; return "inc-" + string(rune('0'+n)) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Heartbeat(ctx); err != nil { // idle: a look, nothing written
		t.Fatal(err)
	}
	env, err := codec.Events.Encode(uuid.New(), domain.WorkerLost{Incarnation: "inc-1", Reason: "lease"}, domain.OwnerExecutor, "executor-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, domain.WorkerStream("w1"), eventstore.Exact(0), env); err != nil {
		t.Fatal(err)
	}
	st := projections.NewState()
	evs, err := store.ReadAll(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		if err := st.Apply(&evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	m, err := projections.WriteCheckpoint(ctx, store, st.Snapshot(), evs[len(evs)-1].Hash, "executor-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Trim(ctx, m.Position, m.Keep); err != nil {
		t.Fatal(err)
	}

	clk.Advance(2 * time.Second)
	if err := w.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.Incarnation(); got != "inc-2" {
		t.Fatalf("after a trim archived its loss, the idle worker is incarnation %q, want a new one (inc-2)", got)
	}
}
