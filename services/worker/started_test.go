package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/services/bus"
	"github.com/turnstile/turnstile/services/worker"
)

// TestStartedSignalsRegistration: Started is open before Start and closed
// once Start has returned, by when the incarnation is in the log.
func TestStartedSignalsRegistration(t *testing.T) {
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { _ = store.Close() })
	b := bus.NewInProcess(quiet())
	t.Cleanup(func() { _ = b.Close() })
	w, err := worker.New(worker.Config{ID: "w1", Store: store, Bus: b, Logger: quiet(), Heartbeat: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Started():
		t.Fatal("Started closed before Start")
	default:
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case <-w.Started():
	default:
		t.Fatal("Started still open after Start returned")
	}
	envs, err := store.ReadStream(context.Background(), domain.WorkerStream("w1"), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(envs) == 0 || envs[0].Type != domain.TypeWorkerRegistered {
		t.Fatalf("worker stream after Start: %v, want worker.registered first", envs)
	}
}
