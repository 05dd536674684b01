package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/services/repository"
	"github.com/turnstile/turnstile/services/worker"
)

// TestSerialFenceRefusesAStaleVerdict: the other order of the race
// TestLostWorkersLateStart checks, on a log without atomic multi-stream
// appends. An executor reads the worker stream (its fold has not seen the
// handoff to w1), then w1 starts the run: its heartbeat lands before
// execution.running, so the verdict that executor decided, appended at the
// version it read, is refused, and nothing the lost incarnation wrote
// follows a verdict.
func TestSerialFenceRefusesAStaleVerdict(t *testing.T) {
	ctx := context.Background()
	mem := memstore.New(memstore.Options{})
	t.Cleanup(func() { _ = mem.Close() })
	store := storetest.SingleStream(mem)
	w, err := worker.New(worker.Config{ID: "w1", Store: store, Logger: quiet(), Heartbeat: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(ctx); err != nil {
		t.Fatal(err)
	}
	const id = "x1"
	requestExecution(t, ctx, store, id)
	// executor-2's view of w1: before the handoff.
	stale, err := repository.LoadWorker(ctx, store, "w1")
	if err != nil {
		t.Fatal(err)
	}
	r := handTo(t, ctx, store, w, id, w.Incarnation())
	defer r.Close()
	if started, err := r.Begin(ctx); !started || err != nil {
		t.Fatalf("Begin = %v, %v", started, err)
	}
	ws, err := store.ReadStream(ctx, domain.WorkerStream("w1"), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	xs, err := store.ReadStream(ctx, domain.ExecutionStream(id), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	hb, run := ws[len(ws)-1], xs[len(xs)-1]
	if hb.Type != domain.TypeWorkerHeartbeat || run.Type != domain.TypeExecutionRunning || hb.Position > run.Position {
		t.Fatalf("worker stream ends with %s at %d, execution stream with %s at %d: want the heartbeat before execution.running",
			hb.Type, hb.Position, run.Type, run.Position)
	}
	verdict, err := stale.DeclareLost(time.Now(), time.Second, true, "its lease expired (test)")
	if err != nil {
		t.Fatal(err)
	}
	env, err := codec.Events.Encode(uuid.New(), verdict, domain.OwnerExecutor, "executor-2")
	if err != nil {
		t.Fatal(err)
	}
	_, err = store.Append(ctx, domain.WorkerStream("w1"), repository.Expected(stale.Version()), env)
	if wv := (*eventstore.WrongVersionError)(nil); !errors.As(err, &wv) {
		t.Fatalf("a verdict decided before the run's heartbeat: append = %v, want a wrong-version refusal", err)
	}
}
