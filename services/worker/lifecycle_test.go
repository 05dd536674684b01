package worker_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/services/bus"
	"github.com/turnstile/turnstile/services/worker"
)

// TestWorkerLifecycle: Stop before Start and Stop twice are fine, and a
// second Start neither registers again nor leaves a goroutine behind once
// Stop has returned (goleak).
func TestWorkerLifecycle(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	store := memstore.New(memstore.Options{})
	defer store.Close()
	b := bus.NewInProcess(quiet())
	defer b.Close()
	w, err := worker.New(worker.Config{ID: "w1", Store: store, Bus: b, Logger: quiet(), Heartbeat: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop() // before Start: nothing to stop, nothing written
	ctx := context.Background()
	for range 2 {
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	envs, err := store.ReadStream(ctx, domain.WorkerStream("w1"), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(envs) != 1 || envs[0].Type != domain.TypeWorkerRegistered {
		t.Fatalf("after two Starts the worker stream holds %d events, want one worker.registered", len(envs))
	}
	w.Stop()
	w.Stop()
}
