package remote_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/services/remote"
	"github.com/turnstile/turnstile/services/repository"
)

// TestMain checks that no test leaves a goroutine behind: every one the
// service starts ends by Stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFollowerOutlivesAFailedSubscription: the follower's subscription
// fails twice (at once, then after its first batch), as PostgreSQL's does
// when a query fails; the service follows the log again from where it
// stopped, so a session is still handed what the log hands it. Before, the
// follower ended at the first failure, and no session was handed anything
// more until the server restarted.
func TestFollowerOutlivesAFailedSubscription(t *testing.T) {
	t.Parallel()
	mem := memstore.New(memstore.Options{})
	store := &failingSubs{Store: mem}
	rs, err := remote.New(remote.Config{Store: store, Lease: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := rs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-rs.Started()
	t.Cleanup(func() {
		rs.Stop()
		cancel()
		_ = mem.Close()
	})
	f := &fixture{store: store, rs: rs}
	ss := f.register(t)
	for _, id := range []string{"x1", "x2"} {
		f.request(t, id)
		f.hand(t, id, ss.Incarnation())
	}
	f.pollFor(t, ss, "x1", "x2") // through the second subscription, which then fails
	f.request(t, "x3")
	f.hand(t, "x3", ss.Incarnation())
	f.pollFor(t, ss, "x3") // through the third
	if n := store.calls.Load(); n != 3 {
		t.Fatalf("%d subscriptions: want the two that failed and one more", n)
	}
	res, err := rs.Poll(context.Background(), ss, -1, 0)
	if err != nil || len(res.Assignments) != 3 {
		t.Fatalf("poll again: %+v, %v; want x1, x2 and x3", res, err)
	}
}

// failingSubs fails its first subscription at once and its second after
// the first batch it delivers.
type failingSubs struct {
	eventstore.Store
	calls atomic.Int32
}

func (f *failingSubs) AtomicMultiStream() bool { return eventstore.AtomicMultiStream(f.Store) }

func (f *failingSubs) Subscribe(ctx context.Context, from uint64, filter eventstore.Filter, handle func([]domain.Envelope) error) error {
	switch f.calls.Add(1) {
	case 1:
		return errors.New("connection reset by peer (test)")
	case 2:
		errDropped := errors.New("subscription dropped (test)")
		err := f.Store.Subscribe(ctx, from, filter, func(batch []domain.Envelope) error {
			if err := handle(batch); err != nil {
				return err
			}
			return errDropped
		})
		return err
	}
	return f.Store.Subscribe(ctx, from, filter, handle)
}

// TestStopWaitsForAWorkerStop: a drained session whose last execution
// ends is stopped (worker.stopped) in a goroutine of the follower's; Stop
// returns only once that append has, so nothing is appended to a store its
// owner closes after Stop. Before, Stop left the goroutine running.
func TestStopWaitsForAWorkerStop(t *testing.T) {
	t.Parallel()
	mem := memstore.New(memstore.Options{})
	store := &gatedStop{Store: mem, entered: make(chan struct{}), release: make(chan struct{})}
	rs, err := remote.New(remote.Config{Store: store, Lease: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-rs.Started()
	f := &fixture{store: mem, rs: rs}
	ss := f.register(t)
	f.request(t, "x1")
	f.hand(t, "x1", ss.Incarnation())
	f.pollFor(t, ss, "x1")
	if err := rs.Drain(context.Background(), ss); err != nil {
		t.Fatal(err)
	}
	// The handoff expires: the drained session has nothing left, and the
	// follower stops it; the append of worker.stopped waits at the gate.
	if _, err := repository.UpdateExecution(context.Background(), mem, "x1", domain.OwnerExecutor, "executor-1", nil, func(x *domain.Execution) (domain.Event, error) {
		return x.ExpireHandoff(time.Now().Add(24 * time.Hour))
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-store.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the follower did not stop the drained session")
	}
	stopped := make(chan bool)
	go func() {
		rs.Stop()
		stopped <- store.appended.Load()
	}()
	select {
	case <-stopped:
		t.Fatal("Stop returned while the follower's append of worker.stopped was still under way")
	case <-time.After(200 * time.Millisecond): // Stop must wait: give it time to return too early
	}
	close(store.release)
	if !<-stopped {
		t.Fatal("Stop returned before the append of worker.stopped did")
	}
	if got := f.types(t, domain.WorkerStream("w1")); got[len(got)-1] != domain.TypeWorkerStopped {
		t.Fatalf("w1's stream: %v, want it to end with worker.stopped", got)
	}
	_ = mem.Close()
}

// gatedStop holds an append of worker.stopped until release is closed.
type gatedStop struct {
	eventstore.Store
	once     sync.Once
	entered  chan struct{} // closed when the append arrives
	release  chan struct{}
	appended atomic.Bool // the held append returned
}

func (g *gatedStop) AtomicMultiStream() bool { return eventstore.AtomicMultiStream(g.Store) }

func (g *gatedStop) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	held := false
	for _, a := range appends {
		for _, e := range a.Events {
			held = held || e.Type == domain.TypeWorkerStopped
		}
	}
	if !held {
		return g.Store.AppendMulti(ctx, appends...)
	}
	g.once.Do(func() { close(g.entered) })
	<-g.release
	defer g.appended.Store(true)
	return g.Store.AppendMulti(ctx, appends...)
}

func (g *gatedStop) Append(ctx context.Context, stream string, expected eventstore.ExpectedVersion, events ...domain.Envelope) (eventstore.AppendResult, error) {
	return g.AppendMulti(ctx, eventstore.StreamAppend{Stream: stream, Expected: expected, Events: events})
}
