package bus_test

import (
	"context"
	"log/slog"
	"testing"

	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/bus"
)

// TestForwarderLifecycle: Stop before Start and Stop twice are fine, and a
// second Start starts no second forwarding goroutine (goleak: once Stop has
// returned no goroutine of the forwarder is left).
func TestForwarderLifecycle(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	store := memstore.New(memstore.Options{})
	defer store.Close()
	b := bus.NewInProcess(slog.New(slog.DiscardHandler))
	defer b.Close()
	before := goleak.IgnoreCurrent() // the store's and the bus's own
	f, err := bus.NewForwarder(bus.ForwarderConfig{Store: store, Publisher: b.Publisher, Checkpoints: &projections.MemCheckpoints{}})
	if err != nil {
		t.Fatal(err)
	}
	f.Stop() // before Start: nothing to stop
	ctx := context.Background()
	for range 2 {
		if err := f.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	<-f.Started()
	f.Stop()
	goleak.VerifyNone(t, before) // while the store is open: a forwarding goroutine would still follow it
	f.Stop()
	if err := f.Err(); err != nil {
		t.Fatalf("Err after Stop = %v, want nil", err)
	}
}

// TestPoisonWatchLifecycle: the poison watch's goroutine is owned: Stop
// waits for it, and a second Stop is fine.
func TestPoisonWatchLifecycle(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b := bus.NewInProcess(slog.New(slog.DiscardHandler))
	defer b.Close()
	pc, err := b.WatchPoison(context.Background(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	<-pc.Started()
	pc.Stop()
	pc.Stop()
}
