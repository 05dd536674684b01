package executor_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/clock"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/executor"
	"github.com/turnstile/turnstile/services/worker"
)

// TestHandoffRacesLostVerdict: the split-brain race of a handoff and a lost
// verdict, made deterministic with two step-driven executors that each see
// the log through their own fold. Both see w1 handed y (so w1 owes the
// log a sign of life from then on: an idle worker's lease would not run).
// Executor A hands x to worker w1 and w1 starts it; executor B sees the
// log late (its fold stops before that grant) and, once w1's lease has
// lapsed by log time, declares w1 lost abandoning y alone (it does not know
// w1 holds x). A, deciding at the same moment on the whole log, declares w1
// lost too, abandoning y and x in the same append. B's verdict lands first; A's loses the race on w1's stream.
// Then w1, which never heard of either, reports x completed: its write
// carries the condition that its worker stream is where its incarnation
// last saw it, so the verdict refuses it atomically, and w1 learns it was
// declared lost (a new incarnation). A folds the verdict,
// abandons x (held by a lost incarnation), and nothing by w1's lost
// incarnation follows the verdict in the log; the audit is clean.
//
// It runs on the log with atomic multi-stream appends only: without them
// (KurrentDB) a worker's writes carry no condition on its stream, and the
// execution's version alone decides (DESIGN.md).
func TestHandoffRacesLostVerdict(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	clk := clock.NewManual(t0)
	store := clockedStore(clk, false)
	cmds := &command.Service{Store: store, Writer: "test"}
	if _, err := cmds.DefineAction(ctx, domain.Policy{Ref: "q", Runner: "core.noop", MaxConcurrent: 2, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Config{ID: "w1", Store: store, Logger: quiet, Heartbeat: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(ctx); err != nil {
		t.Fatal(err)
	}
	inc := w.Incarnation()
	newExec := func(name string) (*executor.Executor, func(to uint64)) {
		e, err := executor.New(executor.Config{Store: store, Clock: clk, Logger: quiet, Name: name, WorkerLease: 15 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		// fold folds the log up to position to (exclusive): the executor's own view.
		return e, func(to uint64) {
			evs, err := store.ReadAll(ctx, e.Position(), 1000)
			if err != nil {
				t.Fatal(err)
			}
			for len(evs) > 0 && evs[len(evs)-1].Position >= to {
				evs = evs[:len(evs)-1]
			}
			e.Fold(evs)
		}
	}
	everything := ^uint64(0)
	a, foldA := newExec("exec-a")
	b, foldB := newExec("exec-b")
	requestOne(t, cmds, "q") // y: handed to w1, which never starts it
	foldA(everything)
	if ds := a.Decide(false); len(ds) != 1 || ds[0].What() != "grant q" {
		t.Fatalf("A's decisions %v, want the grant of y", whats(ds))
	} else if err := a.Commit(ctx, ds[0]); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	id := requestOne(t, cmds, "q")
	beforeGrant, err := store.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	foldB(beforeGrant) // B's view stops here: it will never see the handoff in time

	foldA(everything)
	ds := a.Decide(false)
	if len(ds) != 1 || ds[0].What() != "grant q" {
		t.Fatalf("A's decisions %v, want the grant", whats(ds))
	}
	if err := a.Commit(ctx, ds[0]); err != nil {
		t.Fatal(err)
	}
	xs, err := store.ReadStream(ctx, domain.ExecutionStream(id), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if xs[len(xs)-1].Type != domain.TypeExecutionScheduled {
		t.Fatalf("execution stream ends with %s, want the handoff", xs[len(xs)-1].Type)
	}
	run, err := w.AcceptHandoff(xs[len(xs)-1])
	if err != nil || run == nil {
		t.Fatalf("w1 takes the handoff: %v, %v", run, err)
	}
	defer run.Close()
	if started, err := run.Begin(ctx); err != nil || !started {
		t.Fatalf("w1 starts x: %v, %v", started, err)
	}

	// w1 is silent; 20 s of log time pass. Both executors decide at once.
	clk.Advance(20 * time.Second)
	foldA(everything)
	foldB(beforeGrant)
	dsB, dsA := b.Decide(true), a.Decide(true)
	verdict := func(ds []executor.Decision, who string) executor.Decision {
		t.Helper()
		for _, d := range ds {
			if d.What() == "lose worker w1" {
				return d
			}
		}
		t.Fatalf("%s's decisions %v: no lost verdict for w1", who, whats(ds))
		return executor.Decision{}
	}
	vB, vA := verdict(dsB, "B"), verdict(dsA, "A")
	if err := b.Commit(ctx, vB); err != nil {
		t.Fatalf("B's verdict: %v", err)
	}
	_ = a.Commit(ctx, vA) // loses the race on w1's stream: the fold will show B's verdict

	// w1 reports x done, unaware of the verdict.
	endErr := run.End(ctx, json.RawMessage(`{}`), nil)

	// A folds the verdict and takes x back from the lost incarnation.
	for range 3 {
		foldA(everything)
		for _, d := range a.Decide(true) {
			_ = a.Commit(ctx, d)
		}
	}
	foldA(everything)

	all, err := store.ReadAll(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var lostAt uint64
	verdicts := 0
	for _, env := range all {
		if env.Type == domain.TypeWorkerLost {
			lostAt, verdicts = env.Position, verdicts+1
		}
	}
	if verdicts != 1 {
		t.Fatalf("%d worker.lost verdicts in the log, want 1 (the two executors' verdicts are fenced by w1's stream)", verdicts)
	}
	var after []string
	for _, env := range all {
		if env.Position > lostAt && env.Owner == domain.OwnerWorker && env.Writer == "w1" && env.Stream == domain.ExecutionStream(id) {
			after = append(after, env.Type)
		}
	}
	if len(after) > 0 {
		t.Fatalf("w1's lost incarnation %s wrote %v for x after its verdict (End returned %v)", inc, after, endErr)
	}
	if endErr != nil {
		t.Fatalf("w1's completion: %v (a refusal is logged and gives nil)", endErr)
	}
	if w.Incarnation() == inc {
		t.Fatalf("the refused completion did not tell w1 it was declared lost: still incarnation %s", inc)
	}
	var types []string
	for _, env := range all {
		if env.Stream == domain.ExecutionStream(id) {
			types = append(types, strings.TrimPrefix(env.Type, "execution."))
		}
	}
	if !slices.Contains(types, "abandoned") {
		t.Fatalf("x's stream %v: never abandoned, though its worker's incarnation was declared lost", types)
	}
	rep, err := projections.Audit(ctx, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations {
		t.Errorf("audit: %s at %d (%s %s): %s", v.Rule, v.Position, v.Stream, v.Type, v.Detail)
	}
	t.Logf("x: %v; the verdict at %d; w1 came back as incarnation %s", types, lostAt, w.Incarnation())
}
