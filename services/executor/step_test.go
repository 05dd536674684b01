package executor_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/clock"
	"github.com/turnstile/turnstile/services/executor"
	"github.com/turnstile/turnstile/services/worker"
)

// TestNoGrantPastAWaiterBeingCancelled: when one cycle decides the queue
// timeout of a queue's head, it must not grant the waiter behind it in the
// same cycle: the two appends are independent, so if the timeout's append
// fails (or lands second) the log would show the second waiter granted
// while the first still waits, out of FIFO order. Found by the simulation
// (services/sim).
func TestNoGrantPastAWaiterBeingCancelled(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(t0)
	store := memstore.New(memstore.Options{Clock: clk.Now})
	cmds := &executor.Commands{Store: store, Writer: "test"}
	if _, err := cmds.DefineAction(ctx, domain.Policy{Ref: "q", Runner: "core.noop", MaxConcurrent: 2, QueueTimeoutSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Config{ID: "w1", Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(ctx); err != nil {
		t.Fatal(err)
	}
	first := requestOne(t, cmds, "q")
	clk.Advance(30 * time.Second)
	requestOne(t, cmds, "q")
	clk.Advance(31 * time.Second) // the first has waited 61s, the second 31s

	e, err := executor.New(executor.Config{Store: store, Clock: clk, Logger: slog.New(slog.DiscardHandler), WorkerLease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := store.ReadAll(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	e.Fold(evs)
	ds := e.Decide(true)
	var timeout bool
	for _, d := range ds {
		switch {
		case strings.HasPrefix(d.What(), "queue timeout "+first):
			timeout = true // left uncommitted: its append failed
		case strings.HasPrefix(d.What(), "grant"):
			if err := e.Commit(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !timeout {
		t.Fatalf("decisions %v: no queue timeout for the head %s", whats(ds), first)
	}
	rep, err := projections.Audit(ctx, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations {
		t.Errorf("audit: %s at %d: %s", v.Rule, v.Position, v.Detail)
	}
}

func requestOne(t *testing.T, cmds *executor.Commands, action string) string {
	t.Helper()
	id, _, err := cmds.Request(context.Background(), executor.Request{Action: action})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func whats(ds []executor.Decision) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.What()
	}
	return out
}
