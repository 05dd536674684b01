package executor_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/clock"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/executor"
	"github.com/turnstile/turnstile/services/worker"
)

// TestNoGrantPastAWaiterBeingCancelled: when one cycle decides the queue
// timeout of a queue's head, it must not grant the waiter behind it in the
// same cycle: the two appends are independent, so if the timeout's append
// fails (or lands second) the log would show the second waiter granted
// while the first still waits, out of FIFO order. Found by the simulation
// (package sim).
func TestNoGrantPastAWaiterBeingCancelled(t *testing.T) {
	bothLogs(t, testNoGrantPastAWaiterBeingCancelled)
}

func testNoGrantPastAWaiterBeingCancelled(t *testing.T, single bool) {
	ctx := context.Background()
	clk := clock.NewManual(t0)
	store := clockedStore(clk, single)
	cmds := &command.Service{Store: store, Writer: "test"}
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

// clockedStore is an empty memstore on clk, without atomic multi-stream
// appends if single.
func clockedStore(clk *clock.Manual, single bool) eventstore.Store {
	var s eventstore.Store = memstore.New(memstore.Options{Clock: clk.Now})
	if single {
		s = storetest.SingleStream(s)
	}
	return s
}

func requestOne(t *testing.T, cmds *command.Service, action string) string {
	t.Helper()
	id, _, err := cmds.Request(context.Background(), command.Request{Action: action})
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

// oneWorkerSteps sets up a step-driven executor (15 s worker lease) on
// store, with action "q" (core.noop, limit 2) and worker w1 registered and
// handed one execution of action "h" (limit 1), which it takes and never
// starts: from that handoff on, w1 owes the log a sign of life (an idle
// worker's lease would not run); w1's clock is clk. fold folds what the log
// holds beyond what the executor has folded.
func oneWorkerSteps(t *testing.T, clk *clock.Manual, store eventstore.Store) (cmds *command.Service, w *worker.Worker, e *executor.Executor, fold func()) {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	cmds = &command.Service{Store: store, Writer: "test"}
	if _, err := cmds.DefineAction(ctx, domain.Policy{Ref: "q", Runner: "core.noop", MaxConcurrent: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := cmds.DefineAction(ctx, domain.Policy{Ref: "h", Runner: "core.noop", MaxConcurrent: 1}); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Config{ID: "w1", Store: store, Logger: quiet, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(ctx); err != nil {
		t.Fatal(err)
	}
	e, err = executor.New(executor.Config{Store: store, Clock: clk, Logger: quiet, WorkerLease: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fold = func() {
		evs, err := store.ReadAll(ctx, e.Position(), 1000)
		if err != nil {
			t.Fatal(err)
		}
		e.Fold(evs)
	}
	held := requestOne(t, cmds, "h")
	fold()
	if ds := e.Decide(false); len(ds) != 1 || ds[0].What() != "grant h" {
		t.Fatalf("decisions %v, want the grant of h", whats(ds))
	} else if err := e.Commit(ctx, ds[0]); err != nil {
		t.Fatal(err)
	}
	fold()
	xs, err := store.ReadStream(ctx, domain.ExecutionStream(held), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.AcceptHandoff(xs[len(xs)-1]); err != nil || r == nil {
		t.Fatalf("w1 takes the handoff of %s: %v %v", held, r, err)
	}
	return cmds, w, e, fold
}

// TestLostVerdictCoversEveryHandoff: the lost verdict of a worker and, in
// the same append, the abandonment of everything it holds, must cover every
// handoff to it: so no handoff to a worker is decided in the cycle that
// declares it lost, and no verdict is decided while a handoff to it is not
// yet in the fold. Otherwise a live but stalled worker could start a run
// handed to its lost incarnation. Found by the simulation (package sim).
func TestLostVerdictCoversEveryHandoff(t *testing.T) {
	bothLogs(t, testLostVerdictCoversEveryHandoff)
}

func testLostVerdictCoversEveryHandoff(t *testing.T, single bool) {
	ctx := context.Background()
	for _, unfolded := range []bool{false, true} {
		clk := clock.NewManual(t0)
		store := clockedStore(clk, single)
		cmds, _, e, fold := oneWorkerSteps(t, clk, store)
		id := requestOne(t, cmds, "q")
		if unfolded {
			fold()
			ds := e.Decide(false)
			if len(ds) != 1 || ds[0].What() != "grant q" {
				t.Fatalf("decisions %v, want the grant", whats(ds))
			}
			if err := e.Commit(ctx, ds[0]); err != nil {
				t.Fatal(err)
			}
			// Not folded yet: the lease passes.
			clk.Advance(20 * time.Second)
			if ds := e.Decide(true); len(ds) != 0 {
				t.Fatalf("with the handoff to w1 not yet folded: decisions %v, want none", whats(ds))
			}
		} else {
			clk.Advance(20 * time.Second)
		}
		fold()
		ds := e.Decide(true)
		for _, d := range ds {
			if strings.HasPrefix(d.What(), "grant") {
				t.Fatalf("unfolded=%v: decisions %v hand work to the worker they declare lost", unfolded, whats(ds))
			}
			if err := e.Commit(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		if len(ds) != 1 || ds[0].What() != "lose worker w1" {
			t.Fatalf("unfolded=%v: decisions %v, want the lost verdict", unfolded, whats(ds))
		}
		x, err := cmds.LoadExecution(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]domain.Status{false: domain.StatusRequested, true: domain.StatusScheduling}[unfolded]; x.Status() != want {
			t.Fatalf("unfolded=%v: execution is %s, want %s (abandoned with the verdict)", unfolded, x.Status(), want)
		}
	}
}

// TestVerdictOfUnknownOutcomeHoldsHandoffs: when a lost verdict's append
// fails with an unknown outcome (the store executed it, then timed out) and
// reading the worker's stream back fails too, the executor must not hand
// that worker anything until its fold shows the stream at the verdict's
// version: the verdict may be in the log, and a handoff decided on a fold
// without it would go to a lost incarnation. When the worker writes (the
// verdict did not land), or when the verdict is decided again, the doubt
// ends. Found by the simulation (package sim).
func TestVerdictOfUnknownOutcomeHoldsHandoffs(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		for _, executed := range []bool{true, false} {
			testVerdictOfUnknownOutcome(t, single, executed)
		}
	})
}

func testVerdictOfUnknownOutcome(t *testing.T, single, executed bool) {
	ctx := context.Background()
	clk := clock.NewManual(t0)
	store := &doubtfulStore{Store: clockedStore(clk, single), stream: domain.WorkerStream("w1"), executed: executed}
	cmds, w, e, fold := oneWorkerSteps(t, clk, store)
	id := requestOne(t, cmds, "q")
	clk.Advance(20 * time.Second)
	fold()
	ds := e.Decide(true)
	if len(ds) != 1 || ds[0].What() != "lose worker w1" {
		t.Fatalf("decisions %v, want the lost verdict alone", whats(ds))
	}
	store.armed.Store(true)
	if err := e.Commit(ctx, ds[0]); err == nil {
		t.Fatal("the verdict's append reported success; the test wants an unknown outcome")
	}
	store.armed.Store(false)
	// The fold is as before the verdict, whether or not it landed.
	if ds := e.Decide(false); len(ds) != 0 {
		t.Fatalf("executed=%v: decisions %v while the verdict's outcome is unknown, want none", executed, whats(ds))
	}
	if executed {
		fold() // the verdict: w1 is lost, and nothing is handed to it
		if ds := e.Decide(false); len(ds) != 0 {
			t.Fatalf("after the verdict: decisions %v, want none", whats(ds))
		}
		return
	}
	// The verdict did not land, and the worker writes: it is alive, and
	// the doubt ends.
	if err := w.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	fold()
	ds = e.Decide(false)
	// The grant (and, on a log without atomic multi-stream appends, the
	// rescheduling of h's execution, whose abandonment landed before the
	// verdict's append failed).
	if !slices.ContainsFunc(ds, func(d executor.Decision) bool { return d.What() == "grant q" }) ||
		slices.ContainsFunc(ds, func(d executor.Decision) bool { return strings.HasPrefix(d.What(), "lose worker") }) {
		t.Fatalf("after the worker's heartbeat: decisions %v, want the grant of %s and no verdict", whats(ds), id)
	}
}

// doubtfulStore, when armed, makes appends to stream fail with a timeout,
// after executing them if executed, and fails reads of stream.
type doubtfulStore struct {
	eventstore.Store
	stream   string
	executed bool
	armed    atomic.Bool
}

var errInjectedTimeout = errors.New("injected: timed out")

func (s *doubtfulStore) AtomicMultiStream() bool { return eventstore.AtomicMultiStream(s.Store) }

func (s *doubtfulStore) Append(ctx context.Context, stream string, expected eventstore.ExpectedVersion, events ...domain.Envelope) (eventstore.AppendResult, error) {
	if !s.armed.Load() || stream != s.stream {
		return s.Store.Append(ctx, stream, expected, events...)
	}
	if s.executed {
		if _, err := s.Store.Append(ctx, stream, expected, events...); err != nil {
			return eventstore.AppendResult{}, err
		}
	}
	return eventstore.AppendResult{}, errInjectedTimeout
}

func (s *doubtfulStore) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	if !s.armed.Load() || !slices.ContainsFunc(appends, func(a eventstore.StreamAppend) bool { return a.Stream == s.stream }) {
		return s.Store.AppendMulti(ctx, appends...)
	}
	if s.executed {
		if _, err := s.Store.AppendMulti(ctx, appends...); err != nil {
			return eventstore.AppendResult{}, err
		}
	}
	return eventstore.AppendResult{}, errInjectedTimeout
}

func (s *doubtfulStore) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]domain.Envelope, error) {
	if s.armed.Load() && stream == s.stream {
		return nil, errInjectedTimeout
	}
	return s.Store.ReadStream(ctx, stream, from, limit)
}
