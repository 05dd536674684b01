package executor_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/clock"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/executor"
)

// TestResumesFromSnapshotTail: an executor stopped cleanly saves a
// snapshot of its fold; one started after it resumes from that snapshot and
// folds the tail from the snapshot's position on, its first event included:
// a request appended while no executor ran (for an action nobody defined)
// is rejected by the resumed executor.
func TestResumesFromSnapshotTail(t *testing.T) {
	ctx := context.Background()
	store, snaps, cmds, start := snapshotting(ctx, t)
	rejected := func(id string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			evs, err := store.ReadStream(ctx, domain.ExecutionStream(id), 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			if evs[len(evs)-1].Type == domain.TypeExecutionRejected {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("execution %s not rejected in 10s: its stream ends with %s", id, evs[len(evs)-1].Type)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	e := start()
	rejected(requestOne(t, cmds, "nobody.defined"))
	e.Stop()
	info, ok, err := snaps.Read("executor-state", &projections.StateSnapshot{})
	if err != nil || !ok {
		t.Fatalf("no executor snapshot after a clean stop: %v", err)
	}
	late := requestOne(t, cmds, "nobody.defined") // the tail's first event
	e = start()
	defer e.Stop()
	rejected(late)
	t.Logf("resumed from the snapshot at position %d", info.Next)
}

// snapshotting returns a store, the snapshot files an executor saves its
// fold in when it stops, a command service on the store, and start, which
// starts an executor on them.
func snapshotting(ctx context.Context, t *testing.T) (eventstore.Store, *projections.SnapshotFiles, *command.Service, func() *executor.Executor) {
	clk := clock.NewManual(t0)
	store := clockedStore(clk, false)
	snaps := &projections.SnapshotFiles{Dir: t.TempDir()}
	start := func() *executor.Executor {
		t.Helper()
		e, err := executor.New(executor.Config{Store: store, Clock: clk, Logger: slog.New(slog.DiscardHandler), WorkerLease: time.Hour,
			Tick: 5 * time.Millisecond, Snapshots: snaps, SnapshotEvery: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return e
	}
	return store, snaps, &command.Service{Store: store, Writer: "test"}, start
}
