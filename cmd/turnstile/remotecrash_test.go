package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/internal/waitfor"
	"github.com/turnstile/turnstile/projections"
)

// Nothing lost with remote workers (issue 17, item 8): real `turnstile
// serve` and `turnstile worker --server` processes over loopback HTTP. Each
// test ends with rcRun.finish's checks: every execution ended exactly once
// with its runner's outcome, no attempt overlapped, no event was written for
// an incarnation after it was declared lost, replaced or stopped, the live
// read model equals a rebuild, and `turnstile audit` is clean. Sizes are
// small so that the set stays near a minute and a half; -short makes them
// smaller still.

// rcSizes is (executions, crashes) for a test, smaller with -short.
func rcSizes(full, fullCrashes, short, shortCrashes int) (int, int) {
	if testing.Short() {
		return short, shortCrashes
	}
	return full, fullCrashes
}

// TestRemoteWorkersKilled kills remote worker processes with SIGKILL at
// random instants while executions flow and starts them again under the
// same name (a replacement: what the dead incarnation held is taken back and
// handed again), sometimes at once, sometimes after its lease lapsed.
func TestRemoteWorkersKilled(t *testing.T) {
	t.Parallel()
	n, kills := rcSizes(300, 8, 120, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newRCRun(t, "2s", 3, 4, 10)
	began := time.Now()
	r.submit(ctx)
	for j := range kills {
		r.open((j + 1) * n / (kills + 1))
		time.Sleep(time.Duration(50+r.rng.IntN(500)) * time.Millisecond)
		w := r.workers[r.rng.IntN(len(r.workers))]
		w.kill()
		if r.rng.IntN(3) == 0 {
			time.Sleep(2500 * time.Millisecond) // past the lease: declared lost, taken back
		}
		r.startWorker(w, 4)
		t.Logf("kill %d (%s) done at %s, %d accepted", j+1, w.name, time.Since(began).Round(time.Millisecond), r.sent.Load())
	}
	r.finish(ctx, n)
	t.Logf("finished at %s", time.Since(began).Round(time.Millisecond))
	total := 0
	for _, w := range r.workers {
		total += w.kills
	}
	if total != kills {
		t.Errorf("%d kills, want %d", total, kills)
	}
}

// TestRemoteServerKilled kills `turnstile serve` (embedded store) with
// SIGKILL at random instants while remote workers are attached and starts
// it again: the workers' sessions died with it, so they register again and
// what their old incarnations held is taken back and handed again.
func TestRemoteServerKilled(t *testing.T) {
	t.Parallel()
	n, kills := rcSizes(300, 4, 120, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newRCRun(t, "2s", 3, 4, 10)
	r.submit(ctx)
	for j := range kills {
		r.open((j + 1) * n / (kills + 1))
		time.Sleep(time.Duration(50+r.rng.IntN(500)) * time.Millisecond)
		r.restartServer()
	}
	r.finish(ctx, n)
	reregistered := 0
	for _, w := range r.workers {
		reregistered += strings.Count(w.logs.String(), `msg=registered`)
	}
	if reregistered <= len(r.workers) {
		t.Errorf("the workers registered %d times in all across %d server restarts; want them to register again", reregistered, kills)
	}
}

// TestRemoteWorkerFrozen freezes a remote worker with SIGSTOP while it runs
// an execution, past its lease (serve --worker-lease 1500ms): the execution
// is taken back and handed to another worker, where it completes. When the
// frozen worker is resumed with SIGCONT, its session is refused (401) or its
// late report is (409), nothing of it is written, and it registers again.
func TestRemoteWorkerFrozen(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r := newRCRun(t, "1500ms", 0, 1, 10)
	frozen := &rcWorker{name: "frozen"}
	r.workers = append(r.workers, frozen)
	r.startWorker(frozen, 1)
	hold := domain.Policy{Ref: "rc.hold", Runner: "core.sleep", MaxConcurrent: 1, MaxAttempts: 3}
	if _, err := call(ctx, "POST", r.url()+"/api/v1/actions", hold, rcAdmin, nil); err != nil {
		t.Fatal(err)
	}
	var acc struct{ ID string }
	if _, err := call(ctx, "POST", r.url()+"/api/v1/executions", map[string]any{"action": "rc.hold", "input": map[string]any{"seconds": 3}}, rcAdmin, &acc); err != nil {
		t.Fatal(err)
	}
	view := func(what string, ok func(projections.ExecutionView) bool) projections.ExecutionView {
		t.Helper()
		var v projections.ExecutionView
		waitfor.That(t, what, func() bool {
			v = projections.ExecutionView{}
			if _, err := call(ctx, "GET", r.url()+"/api/v1/executions/"+acc.ID, nil, rcAdmin, &v); err != nil {
				t.Fatal(err)
			}
			return ok(v)
		}, waitfor.Note(func() string { return fmt.Sprintf("the execution is %+v", v) }), frozen.logs)
		return v
	}
	view("the frozen worker to run it", func(v projections.ExecutionView) bool {
		return v.Status == domain.StatusRunning && v.Worker == "frozen"
	})
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	other := &rcWorker{name: "other"}
	r.workers = append(r.workers, other)
	r.startWorker(other, 2)
	v := view("the second attempt on the other worker", func(v projections.ExecutionView) bool { return v.Worker == "other" && v.Attempt == 2 })
	t.Logf("handed to the other worker (attempt %d) %.1fs after SIGSTOP", v.Attempt, time.Since(stoppedAt).Seconds())
	// Resume it while attempt 2 runs: attempt 1's sleep is over, so it
	// reports at once, and must be refused.
	if err := frozen.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitfor.That(t, "the resumed worker to register again", func() bool { return strings.Count(frozen.logs.String(), "msg=registered") >= 2 }, frozen.logs)
	logs := frozen.logs.String()
	if !strings.Contains(logs, "the server ended this incarnation") && !strings.Contains(logs, "report refused") {
		t.Errorf("the resumed worker was neither refused nor told its incarnation ended:\n%s", logs)
	}
	v = view("the end", func(v projections.ExecutionView) bool { return v.Status.Terminal() })
	if v.Status != domain.StatusCompleted || v.Worker != "other" || v.Attempt != 2 {
		t.Errorf("the execution ended %s on %s attempt %d, want completed on other, attempt 2", v.Status, v.Worker, v.Attempt)
	}
	// A little flow through both workers, the resumed one included.
	r.submit(ctx)
	time.Sleep(time.Second)
	r.mu.Lock()
	r.ids[acc.ID] = "rc.hold"
	r.actions["rc.hold"] = "core.sleep"
	r.extra = 1
	r.mu.Unlock()
	lost, _ := r.finish(ctx, 40)
	if lost == 0 {
		t.Error("no incarnation was declared lost")
	}
}

// TestRemoteNetworkCut cuts the network between the remote workers and the
// server (a proxy in the test drops every connection and refuses new ones)
// a few times, for 0.5 to 4 s each, while executions flow: shorter cuts
// than the lease are crossed by the worker package's retries (reports are
// idempotent), longer ones end in a lost verdict, a take-back and a new
// registration.
func TestRemoteNetworkCut(t *testing.T) {
	t.Parallel()
	n, cuts := rcSizes(200, 3, 100, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newRCRun(t, "2s", 3, 4, 10)
	r.submit(ctx)
	for j := range cuts {
		r.open((j + 1) * n / (cuts + 1))
		time.Sleep(time.Duration(50+r.rng.IntN(400)) * time.Millisecond)
		d := time.Duration(500+r.rng.IntN(3500)) * time.Millisecond
		t.Logf("cut %d: %s", j+1, d)
		r.proxy.cutFor(d)
	}
	r.finish(ctx, n)
	if r.proxy.cuts.Load() == 0 {
		t.Error("the cuts dropped no connection")
	}
}
