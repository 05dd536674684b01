package worker_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/services/repository"
	"github.com/turnstile/turnstile/services/worker"
)

// requestExecution writes execution id's request of action "act" to the log,
// as the API would.
func requestExecution(t *testing.T, ctx context.Context, store eventstore.Store, id string) {
	t.Helper()
	req, err := domain.NewExecution(id).Request(domain.ExecutionRequested{Action: "act"})
	if err != nil {
		t.Fatal(err)
	}
	renv, err := codec.Events.Encode(uuid.New(), req, domain.OwnerExecutor, "executor-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, domain.ExecutionStream(id), eventstore.NoStream, renv); err != nil {
		t.Fatal(err)
	}
}

// handTo grants the requested execution id and hands it to worker w1's
// incarnation inc through the log, as executor-1 would, then gives the
// handoff to w; it returns w's run of it.
func handTo(t *testing.T, ctx context.Context, store eventstore.Store, w *worker.Worker, id, inc string) *worker.Run {
	t.Helper()
	p := domain.Policy{Ref: "act", Runner: "core.noop"}.WithDefaults()
	for _, step := range []repository.Decide{
		func(x *domain.Execution) (domain.Event, error) { return x.Grant("") },
		func(x *domain.Execution) (domain.Event, error) { return x.Schedule("w1", inc, p) },
	} {
		if _, err := repository.UpdateExecution(ctx, store, id, domain.OwnerExecutor, "executor-1", nil, step); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := store.ReadStream(ctx, domain.ExecutionStream(id), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	r, err := w.AcceptHandoff(evs[len(evs)-1])
	if err != nil || r == nil {
		t.Fatalf("AcceptHandoff = %v, %v", r, err)
	}
	return r
}
