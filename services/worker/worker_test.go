package worker_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore/codec"
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

// TestSameIDInTwoProcesses: a second worker registering an id that a live
// worker holds supersedes it: the first learns it from its next heartbeat,
// stops acting and never registers again, so the two do not take the id
// from each other in turn. Both are idle: they learn it by reading the
// stream, and neither writes a heartbeat (an idle worker writes nothing).
func TestSameIDInTwoProcesses(t *testing.T) {
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { _ = store.Close() })
	start := func() *worker.Worker {
		b := bus.NewInProcess(quiet())
		t.Cleanup(func() { _ = b.Close() })
		w, err := worker.New(worker.Config{ID: "twin", Store: store, Bus: b, Logger: quiet(), Heartbeat: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		return w
	}
	first := start()
	time.Sleep(30 * time.Millisecond) // a few looks of the first at its lease
	second := start()
	select {
	case <-first.Superseded():
	case <-time.After(30 * time.Second):
		t.Fatal("the first worker never learned that the second took its id")
	}
	if got := first.SupersededBy(); got != second.Incarnation() {
		t.Fatalf("superseded by %q, want the second worker's incarnation %q", got, second.Incarnation())
	}
	select {
	case <-second.Superseded():
		t.Fatal("the second worker was superseded too")
	default:
	}
	first.Stop()
	time.Sleep(50 * time.Millisecond) // more looks of the second at its lease
	envs, err := store.ReadStream(context.Background(), domain.WorkerStream("twin"), 0, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	regs := 0
	for i := range envs {
		ev, err := codec.Events.Decode(&envs[i])
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.(type) {
		case domain.WorkerRegistered:
			regs++
		case domain.WorkerHeartbeat:
			t.Errorf("worker.heartbeat written at version %d by incarnation %s: an idle worker owes no sign of life", envs[i].Version, e.Incarnation)
		case domain.WorkerStopped:
			t.Errorf("worker.stopped written at version %d by incarnation %s: the superseded worker must write nothing", envs[i].Version, e.Incarnation)
		}
	}
	if regs != 2 {
		t.Errorf("%d registrations of worker twin, want 2 (no re-registration by the superseded one)", regs)
	}
	last, err := codec.Events.Decode(&envs[len(envs)-1])
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := last.(domain.WorkerRegistered); !ok || r.Incarnation != second.Incarnation() {
		t.Errorf("last event %T %+v, want the second worker's registration", last, last)
	}
}
