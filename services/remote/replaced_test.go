package remote_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/services/remote"
)

// TestReplacedElsewhereRefusesTheOldSession: two remote services on one
// log (two server processes). Worker w1 registers through the first, is
// handed x1 and polls it; it registers again through the second (a new
// incarnation, so the first's session is replaced), and the first's
// follower has not seen that registration yet: its view of w1's stream is
// the one of its own registration. A report through the first with the old
// session is then refused with domain.ErrWorkerReplaced (409) and writes
// nothing: on an atomic log by the report guard, which reloads the worker
// stream when its stale version is refused and must then find the
// incarnation replaced (report.go, guard); on a single-stream log by the
// serial fence's heartbeat. Without the guard's incarnation check the
// reload passes (w1 is active, under another incarnation) and the replaced
// incarnation's execution.running lands after the new registration.
func TestReplacedElsewhereRefusesTheOldSession(t *testing.T) {
	for _, single := range []bool{false, true} {
		name := "atomic"
		if single {
			name = "single-stream"
		}
		for _, status := range []string{remote.ReportRunning, remote.ReportCompleted} {
			t.Run(name+"/"+status, func(t *testing.T) {
				t.Parallel()
				testReplacedElsewhere(t, single, status)
			})
		}
	}
}

func testReplacedElsewhere(t *testing.T, single bool, status string) {
	ctx := context.Background()
	mem := memstore.New(memstore.Options{})
	var store eventstore.Store = mem
	if single {
		store = storetest.SingleStream(mem)
	}
	t.Cleanup(func() { _ = mem.Close() })
	start := func(st eventstore.Store) *remote.Service {
		rs, err := remote.New(remote.Config{Store: st, Lease: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		if err := rs.Start(cctx); err != nil {
			t.Fatal(err)
		}
		<-rs.Started()
		t.Cleanup(func() { rs.Stop(); cancel() })
		return rs
	}
	f := &fixture{store: store, rs: start(blind{store})} // the first process: its follower lags behind registrations
	other := start(store)                                // the second process
	old := f.register(t)
	const id = "x1"
	f.request(t, id)
	f.hand(t, id, old.Incarnation())
	f.pollFor(t, old, id)
	op, err := other.Register(ctx, remote.Registration{Name: "w1", Runners: []string{"my.job"}, Slots: 4}, "127.0.0.2")
	if err != nil {
		t.Fatalf("registering w1 again through the second process: %v", err)
	}
	if op.Incarnation == old.Incarnation() {
		t.Fatal("the second registration kept the incarnation")
	}
	h := f.head(t)
	_, err = f.rs.Report(ctx, old, remote.Report{Execution: id, Status: status})
	if !errors.Is(err, domain.ErrWorkerReplaced) {
		t.Errorf("the replaced incarnation's %s report: %v, want a refusal wrapping domain.ErrWorkerReplaced (409)", status, err)
	}
	if got := f.head(t); got != h {
		t.Errorf("the replaced incarnation's %s report wrote %d events: execution stream %v, worker stream %v",
			status, got-h, f.types(t, domain.ExecutionStream(id)), f.types(t, domain.WorkerStream("w1")))
	}
	if got, want := f.types(t, domain.ExecutionStream(id)), []string{domain.TypeExecutionRequested, domain.TypeExecutionScheduling, domain.TypeExecutionScheduled}; !slices.Equal(got, want) {
		t.Errorf("execution stream %v, want %v (nothing written by the replaced incarnation)", got, want)
	}
}

// blind is a store whose subscriptions pass over worker.registered: a
// follower that has not seen another process's registration yet.
type blind struct{ eventstore.Store }

func (b blind) AtomicMultiStream() bool { return eventstore.AtomicMultiStream(b.Store) }

func (b blind) Subscribe(ctx context.Context, from uint64, filter eventstore.Filter, handle func([]domain.Envelope) error) error {
	return b.Store.Subscribe(ctx, from, filter, func(batch []domain.Envelope) error {
		kept := slices.DeleteFunc(slices.Clone(batch), func(e domain.Envelope) bool { return e.Type == domain.TypeWorkerRegistered })
		if len(kept) == 0 {
			return nil
		}
		return handle(kept)
	})
}
