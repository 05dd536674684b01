package repository_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/services/repository"
)

// TestLoadWorkerPassesOverUndecodableEvents: an event of the worker stream
// that does not decode leaves the state as it was but counts for its
// version, so the next append expects the stream's real version.
func TestLoadWorkerPassesOverUndecodableEvents(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	defer store.Close()
	w, err := repository.UpdateWorker(ctx, store, "w1", domain.OwnerWorker, "w1", nil, func(s *domain.Worker) (domain.Event, error) {
		return s.Register("inc-1", 4, []string{"core.noop"}, "host", 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	bad := domain.Envelope{ID: uuid.New(), Type: "worker.heartbeat", SchemaVersion: 1, Owner: domain.OwnerExecutor, Data: json.RawMessage(`{"in_flight":"many"}`)}
	if _, err := store.Append(ctx, domain.WorkerStream("w1"), eventstore.Exact(uint64(w.Version())), bad); err != nil {
		t.Fatal(err)
	}
	got, err := repository.LoadWorker(ctx, store, "w1")
	if err != nil {
		t.Fatalf("LoadWorker over an undecodable event: %v", err)
	}
	if got.Version() != 1 || got.Incarnation() != "inc-1" || got.Status() != domain.WorkerActive {
		t.Fatalf("LoadWorker: version %d, incarnation %s, %s; want 1, inc-1, active", got.Version(), got.Incarnation(), got.Status())
	}
	// A heartbeat decided on the state before it (version 0) loses the race,
	// catches up (CatchUpWorker) and lands at the next version.
	if _, err := repository.UpdateWorker(ctx, store, "w1", domain.OwnerWorker, "w1", w, func(s *domain.Worker) (domain.Event, error) {
		return s.Heartbeat("inc-1", 0)
	}); err != nil {
		t.Fatalf("heartbeat after an undecodable event: %v", err)
	}
	if got, _ := repository.LoadWorker(ctx, store, "w1"); got.Version() != 2 {
		t.Fatalf("after the heartbeat the version is %d, want 2", got.Version())
	}
	if none, err := repository.LoadWorker(ctx, store, "nobody"); err != nil || none.Status() != domain.WorkerUnknown {
		t.Fatalf("LoadWorker of a missing stream: %v, %v", none, err)
	}
}

// TestGuardFencesTheAppend: UpdateExecutionGuarded writes only while the
// guard's condition holds; a failed condition asks the guard again (fresh),
// and the guard's error refuses the write with nothing written.
func TestGuardFencesTheAppend(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	defer store.Close()
	req, err := codec.Events.Encode(uuid.New(), domain.ExecutionRequested{Action: "a"}, domain.OwnerAPI, "api")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, domain.ExecutionStream("x1"), eventstore.NoStream, req); err != nil {
		t.Fatal(err)
	}
	fence := domain.WorkerStream("w1")
	for i := range 3 {
		e, _ := codec.Events.Encode(uuid.New(), domain.WorkerHeartbeat{Incarnation: "inc-1"}, domain.OwnerWorker, "w1")
		if _, err := store.Append(ctx, fence, eventstore.Any, e); err != nil {
			t.Fatal(i, err)
		}
	}
	var asked []bool
	guard := func(_ context.Context, fresh bool) (eventstore.StreamAppend, error) {
		asked = append(asked, fresh)
		if !fresh {
			return eventstore.StreamAppend{Stream: fence, Expected: eventstore.Exact(0)}, nil // stale on purpose
		}
		return eventstore.StreamAppend{Stream: fence, Expected: eventstore.Exact(2)}, nil
	}
	cancel := func(x *domain.Execution) (domain.Event, error) { return x.Cancel(domain.OwnerExecutor, "e", "test") }
	x, err := repository.UpdateExecutionGuarded(ctx, store, "x1", domain.OwnerExecutor, "e", nil, guard, cancel)
	if err != nil {
		t.Fatalf("guarded append: %v", err)
	}
	if len(asked) != 2 || asked[0] || !asked[1] || x.Version() != 1 {
		t.Fatalf("the guard was asked %v (want [false true]); version %d, want 1", asked, x.Version())
	}
	refused := errors.New("not mine any more")
	_, err = repository.UpdateExecutionGuarded(ctx, store, "x1", domain.OwnerExecutor, "e", nil,
		func(context.Context, bool) (eventstore.StreamAppend, error) {
			return eventstore.StreamAppend{}, refused
		},
		func(x *domain.Execution) (domain.Event, error) {
			return domain.ExecutionCancelRequested{Reason: "again"}, nil
		})
	if !errors.Is(err, refused) {
		t.Fatalf("a guard's refusal: %v, want it returned as is", err)
	}
	if evs, _ := store.ReadStream(ctx, domain.ExecutionStream("x1"), 0, 10); len(evs) != 2 {
		t.Fatalf("the execution stream has %d events, want 2 (nothing written after the refusal)", len(evs))
	}
}
