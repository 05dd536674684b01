package worker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/services/repository"
	"github.com/turnstile/turnstile/services/worker"
)

// TestLostWorkersLateStart: a worker holds a handoff; an executor that has
// not seen that handoff (a handover: the new executor's view stops before
// the scheduled event) declares the worker lost, so nobody abandons the
// execution; then the worker, which has not heard the verdict, starts the
// run. The fence on its own stream (Run.guard: every write of a run
// carries the condition that the worker stream is where the incarnation
// last saw it) refuses the start atomically: the execution stays scheduled,
// and the worker learns that it was declared lost and registers anew.
// Without the fence, execution.running by a lost incarnation follows its
// worker.lost in the log.
//
// On a log without atomic multi-stream appends (storetest.SingleStream, as
// KurrentDB) the run's heartbeat, written before its first write at the
// worker stream's version (serialfence.go), is refused the same way
// (simulation seed 135, single-stream with split brain and archiving: a
// lost incarnation started a run handed to it by the other executor).
func TestLostWorkersLateStart(t *testing.T) {
	for _, single := range []bool{false, true} {
		name := "atomic"
		if single {
			name = "single-stream"
		}
		t.Run(name, func(t *testing.T) { testLostWorkerLateStart(t, single) })
	}
}

func testLostWorkerLateStart(t *testing.T, single bool) {
	ctx := context.Background()
	mem := memstore.New(memstore.Options{})
	t.Cleanup(func() { _ = mem.Close() })
	var store eventstore.Store = mem
	if single {
		store = storetest.SingleStream(mem)
	}
	n := 0
	w, err := worker.New(worker.Config{ID: "w1", Store: store, Logger: quiet(), Heartbeat: time.Hour,
		NewIncarnation: func() string { n++; return "inc-" + string(rune('0'+n)) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(ctx); err != nil {
		t.Fatal(err)
	}
	inc := w.Incarnation()

	// An execution handed to w1's incarnation.
	const id = "x1"
	requestExecution(t, ctx, store, id)
	r := handTo(t, ctx, store, w, id, inc)
	defer r.Close()

	// executor-2, which has not folded the handoff, declares w1 lost: no
	// abandonment of x1 comes with the verdict.
	if _, err := repository.UpdateWorker(ctx, store, "w1", domain.OwnerExecutor, "executor-2", nil, func(s *domain.Worker) (domain.Event, error) {
		return s.DeclareLost(time.Now(), time.Second, true, "its lease expired (test)")
	}); err != nil {
		t.Fatal(err)
	}

	started, err := r.Begin(ctx)
	if err != nil {
		t.Fatalf("Begin after the verdict: %v", err)
	}
	types := func(stream string) []string {
		evs, err := store.ReadStream(ctx, stream, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs {
			out = append(out, e.Type)
		}
		return out
	}
	got := types(domain.ExecutionStream(id))
	if started || slices.Contains(got, domain.TypeExecutionRunning) {
		t.Fatalf("a worker declared lost started a run after its verdict (Begin = %v): execution stream %v, worker stream %v", started, got, types(domain.WorkerStream("w1")))
	}
	if want := []string{domain.TypeExecutionRequested, domain.TypeExecutionScheduling, domain.TypeExecutionScheduled}; !slices.Equal(got, want) {
		t.Fatalf("execution stream %v, want %v (nothing written by the lost incarnation)", got, want)
	}
	if now := w.Incarnation(); now == inc {
		t.Fatalf("the refused start did not tell the worker it was declared lost: still incarnation %s", inc)
	}
	ws := types(domain.WorkerStream("w1"))
	if want := []string{domain.TypeWorkerRegistered, domain.TypeWorkerLost, domain.TypeWorkerRegistered}; !slices.Equal(ws, want) {
		t.Fatalf("worker stream %v, want %v", ws, want)
	}
}
