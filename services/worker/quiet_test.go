package worker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/services/clock"
	"github.com/turnstile/turnstile/services/repository"
	"github.com/turnstile/turnstile/services/worker"
)

// TestWorkerPaysItsDebts: a worker writes a heartbeat only to pay a debt
// of a sign of life (domain.Worker.Owe), once the debt is MarkEvery old by
// its own clock. Idle, it writes nothing for hours. Handed a run, it owes
// from the handoff; while it holds the run it owes again from each of its
// heartbeats; once the run is over and the last debt paid, it is quiet
// again. An idle worker still learns from the log (by reading its stream
// when it looks at its lease) that it was declared lost, and registers as
// a new incarnation.
func TestWorkerPaysItsDebts(t *testing.T) {
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
	inc := w.Incarnation()
	types := func() []string {
		evs, err := store.ReadStream(ctx, domain.WorkerStream("w1"), 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs {
			out = append(out, e.Type)
		}
		return out
	}
	beats := func() int {
		return len(slices.DeleteFunc(types(), func(s string) bool { return s != domain.TypeWorkerHeartbeat }))
	}
	look := func(d time.Duration, want int, when string) {
		t.Helper()
		clk.Advance(d)
		if err := w.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
		if got := beats(); got != want {
			t.Fatalf("%s: %d heartbeats in the log, want %d", when, got, want)
		}
	}
	for range 3 {
		look(time.Hour, 0, "idle")
	}

	// An execution handed to w1.
	const id = "x1"
	requestExecution(t, ctx, store, id)
	r := handTo(t, ctx, store, w, id, inc)
	look(time.Second, 0, "1 s into the debt of the handoff")
	look(3*time.Second, 1, "4 s into the debt of the handoff")
	look(3*time.Second, 1, "holding the run, 3 s after the heartbeat")
	look(time.Second, 2, "holding the run, 4 s after the heartbeat")
	r.Close()
	look(4*time.Second, 3, "the run over, 4 s after the heartbeat (it held the run since)")
	for range 3 {
		look(time.Hour, 3, "idle again")
	}

	// Declared lost while idle (say, by a forced verdict): the worker learns
	// it when it next looks at its lease, and registers anew.
	if _, err := repository.UpdateWorker(ctx, store, "w1", domain.OwnerExecutor, "executor-1", nil, func(s *domain.Worker) (domain.Event, error) {
		return s.DeclareLost(clk.Now(), time.Second, true, "test")
	}); err != nil {
		t.Fatal(err)
	}
	look(2*time.Second, 3, "after the verdict")
	if w.Incarnation() == inc {
		t.Fatalf("an idle worker declared lost did not learn it: still incarnation %s", inc)
	}
	if got := types(); got[len(got)-1] != domain.TypeWorkerRegistered {
		t.Fatalf("worker stream %v, want the new incarnation's registration last", got)
	}
}
