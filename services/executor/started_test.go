package executor_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/internal/startstop"
	"github.com/turnstile/turnstile/services/executor"
)

// TestStartedSignalsCatchUp: Started is closed once the executor has
// folded the log as it was at Start, and Ready agrees with it from then on;
// on a log with history it is not closed before the fold reached the head.
func TestStartedSignalsCatchUp(t *testing.T) {
	store := newStore(false)
	defer func() { _ = store.Close() }()
	s := startSystem(t, store, 1, 1, 4)
	define(t, s.cmds, "st.one", "core.noop", 2)
	requestAll(t, s.cmds, []string{"st.one"}, 20, 2, `{}`)
	s.waitIdle(t, 60*time.Second)
	head, err := store.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e, err := executor.New(executor.Config{Store: store, Logger: quietLogger(), Name: "late", Standby: true})
	if err != nil {
		t.Fatal(err)
	}
	if e.Ready() {
		t.Fatal("ready before Start")
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := startstop.WaitAllStarted(ctx, e); err != nil {
		t.Fatal(err)
	}
	if !e.Ready() || e.Position() < head {
		t.Fatalf("Started closed at position %d (ready %v); the log was at %d", e.Position(), e.Ready(), head)
	}
}

// TestExecutorStartStopShape: Stop before Start and Stop twice are fine,
// and a second Start runs no second loop: once Stop has returned no
// goroutine of the executor is left (goleak).
func TestExecutorStartStopShape(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	store := newStore(false)
	defer func() { _ = store.Close() }()
	e, err := executor.New(executor.Config{Store: store, Logger: quietLogger(), Name: "shape"})
	if err != nil {
		t.Fatal(err)
	}
	before := goleak.IgnoreCurrent() // the store's own
	e.Stop()                         // before Start: nothing to stop
	for range 2 {
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := startstop.WaitAllStarted(ctx, e); err != nil {
		t.Fatal(err)
	}
	e.Stop()
	goleak.VerifyNone(t, before) // while the store is open: a second loop would still follow it
	e.Stop()
	select {
	case <-e.Done():
	default:
		t.Fatal("Done still open after Stop")
	}
}
