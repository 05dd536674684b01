package repository_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/services/repository"
)

// TestSerialFence: the heartbeat lands after everything in the log when it
// is called, even when the caller's state of the worker stream is stale and
// a heartbeat identical to the one it would decide on that state is there
// already (written before the handoff: appending at the stale version
// would replay it, and the run would follow no heartbeat of its own); it
// reads only the stream's events after the caller's state; and it is
// refused, writing nothing, once the incarnation was declared lost.
func TestSerialFence(t *testing.T) {
	ctx := context.Background()
	mem := memstore.New(memstore.Options{})
	defer mem.Close()
	reads := &readLog{Store: storetest.SingleStream(mem)}
	var store eventstore.Store = reads
	stale, err := repository.UpdateWorker(ctx, store, "w1", domain.OwnerWorker, "w1", nil, func(w *domain.Worker) (domain.Event, error) {
		return w.Register("inc-1", 4, []string{"core.noop"}, "host", 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	// The heartbeat the fence would decide on stale lands first (an earlier
	// run's fence), then more of the stream, then a handoff.
	if _, err := repository.UpdateWorker(ctx, store, "w1", domain.OwnerWorker, "w1", stale.Clone(), func(w *domain.Worker) (domain.Event, error) {
		return w.Heartbeat("inc-1", 1)
	}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := repository.UpdateWorker(ctx, store, "w1", domain.OwnerWorker, "w1", nil, func(w *domain.Worker) (domain.Event, error) {
			return w.Heartbeat("inc-1", 2)
		}); err != nil {
			t.Fatal(err)
		}
	}
	handoff := appendOther(t, store, "execution-x1")

	reads.from = nil
	st, err := repository.SerialFence(ctx, store, "w1", "inc-1", 1, stale)
	if err != nil {
		t.Fatalf("SerialFence: %v", err)
	}
	evs, err := mem.ReadStream(ctx, domain.WorkerStream("w1"), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if len(evs) != 8 || last.Type != domain.TypeWorkerHeartbeat || last.Position <= handoff || st.Version() != int64(last.Version) {
		t.Fatalf("worker stream of %d events ends with %s at position %d (state at version %d), the handoff is at %d: want a new heartbeat after the handoff",
			len(evs), last.Type, last.Position, st.Version(), handoff)
	}
	if stale.Version() != 0 {
		t.Fatalf("SerialFence changed the caller's state (now at version %d)", stale.Version())
	}
	if want := []uint64{1}; !slices.Equal(reads.from, want) {
		t.Fatalf("SerialFence read the worker stream from versions %v, want %v (only after the caller's state)", reads.from, want)
	}

	// Declared lost: refused, nothing written.
	if _, err := repository.UpdateWorker(ctx, store, "w1", domain.OwnerExecutor, "executor-2", nil, func(w *domain.Worker) (domain.Event, error) {
		return w.DeclareLost(time.Now(), time.Second, true, "its lease expired (test)")
	}); err != nil {
		t.Fatal(err)
	}
	h, _ := mem.Head(ctx)
	if _, err := repository.SerialFence(ctx, store, "w1", "inc-1", 1, st); !errors.Is(err, domain.ErrWorkerReplaced) {
		t.Fatalf("SerialFence after a verdict: %v, want domain.ErrWorkerReplaced", err)
	}
	if got, _ := mem.Head(ctx); got != h {
		t.Fatalf("a refused fence wrote %d events", got-h)
	}
}

// readLog records the versions its worker-stream reads start from.
type readLog struct {
	eventstore.Store
	from []uint64
}

func (r *readLog) AtomicMultiStream() bool { return eventstore.AtomicMultiStream(r.Store) }

func (r *readLog) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]domain.Envelope, error) {
	if stream == domain.WorkerStream("w1") {
		r.from = append(r.from, from)
	}
	return r.Store.ReadStream(ctx, stream, from, limit)
}

// appendOther appends an event to stream (standing for a handoff) and returns its position.
func appendOther(t *testing.T, store eventstore.Store, stream string) uint64 {
	t.Helper()
	req, err := domain.NewExecution("x1").Request(domain.ExecutionRequested{Action: "act"})
	if err != nil {
		t.Fatal(err)
	}
	env, err := codec.Events.Encode(uuid.New(), req, domain.OwnerExecutor, "executor-1")
	if err != nil {
		t.Fatal(err)
	}
	res, err := store.Append(context.Background(), stream, eventstore.NoStream, env)
	if err != nil {
		t.Fatal(err)
	}
	return res.Position
}
