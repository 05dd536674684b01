package worker_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/services/bus"
	"github.com/turnstile/turnstile/services/worker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(nopWriter{}, &slog.HandlerOptions{Level: slog.LevelError}))
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// TestDrainIdleWorker: a drain with nothing in flight records draining and
// stopped and returns; draining again, or stopping, does nothing more; a
// worker that never started has nothing to drain.
func TestDrainIdleWorker(t *testing.T) {
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { _ = store.Close() })
	b := bus.NewInProcess(quiet())
	t.Cleanup(func() { _ = b.Close() })
	w, err := worker.New(worker.Config{ID: "w1", Store: store, Bus: b, Logger: quiet(), Heartbeat: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Drain(context.Background(), time.Second); err != nil {
		t.Fatalf("Drain before Start: %v", err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Drain(context.Background(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := w.Drain(context.Background(), time.Hour); err != nil {
		t.Fatal(err)
	}
	w.Stop()
	envs, err := store.ReadStream(context.Background(), domain.WorkerStream("w1"), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range envs {
		got = append(got, e.Type)
	}
	if want := []string{domain.TypeWorkerRegistered, domain.TypeWorkerDraining, domain.TypeWorkerStopped}; !slices.Equal(got, want) {
		t.Fatalf("worker-w1 %v, want %v", got, want)
	}
}
