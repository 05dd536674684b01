package main

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/postgres"
	"github.com/turnstile/turnstile/internal/waitfor"
	"github.com/turnstile/turnstile/projections"
)

// TestWorkerStoppedPastItsLease: a worker process frozen with SIGSTOP while
// it runs an execution goes silent past its lease; the executor declares it
// lost and hands the execution to another worker, where it completes. When
// the frozen worker is resumed with SIGCONT, its late report is refused (the
// log has no event of it for that attempt after the verdict), it comes back
// as a new incarnation, and the execution still has exactly one end.
func TestWorkerStoppedPastItsLease(t *testing.T) {
	base := pgTestURL(t)
	bin := turnstileBinary(t)
	storeURL, schema := pgTestSchema(t, bin, base)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The API with the executor in-process (a 2 s worker lease), no workers.
	api := startProc(t, bin, "api", "serve", "--store", storeURL, "--addr", "127.0.0.1:0", "--workers", "0", "--worker-lease", "2s")
	apiURL := "http://" + api.waitLog(t, `msg="turnstile serving" addr=(\S+)`)[1]
	frozen := startProc(t, bin, "worker w1", "worker", "--store", storeURL, "--id", "w1", "--slots", "1", "--heartbeat", "200ms")
	frozen.waitLog(t, `turnstile worker started`)

	pol := domain.Policy{Ref: "stop.sleep", Runner: "core.sleep", MaxConcurrent: 1, MaxAttempts: 3}
	if _, err := call(ctx, "POST", apiURL+"/api/v1/actions", pol, nil, nil); err != nil {
		t.Fatal(err)
	}
	var acc struct{ ID string }
	if _, err := call(ctx, "POST", apiURL+"/api/v1/executions", map[string]any{"action": "stop.sleep", "input": map[string]any{"seconds": 4}}, nil, &acc); err != nil {
		t.Fatal(err)
	}
	view := func() projections.ExecutionView {
		var v projections.ExecutionView
		if _, err := call(ctx, "GET", apiURL+"/api/v1/executions/"+acc.ID, nil, nil, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	waitFor := func(what string, ok func(projections.ExecutionView) bool) projections.ExecutionView {
		t.Helper()
		var v projections.ExecutionView
		waitfor.That(t, what, func() bool { v = view(); return ok(v) },
			waitfor.Note(func() string { return fmt.Sprintf("the execution is %+v", v) }))
		return v
	}
	waitFor("w1 to run it", func(v projections.ExecutionView) bool { return v.Status == domain.StatusRunning && v.Worker == "w1" })

	// Freeze w1 mid-run, then start a second worker to take over.
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	other := startProc(t, bin, "worker w2", "worker", "--store", storeURL, "--id", "w2", "--slots", "1", "--heartbeat", "200ms")
	other.waitLog(t, `turnstile worker started`)
	v := waitFor("w2 to run the second attempt", func(v projections.ExecutionView) bool { return v.Worker == "w2" && v.Attempt == 2 })
	t.Logf("handed to w2 (attempt %d) %.1fs after SIGSTOP", v.Attempt, time.Since(stoppedAt).Seconds())

	// Resume w1 while w2 still runs attempt 2: its attempt 1 finishes (the
	// sleep's time has passed) and its report must be refused.
	if err := frozen.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	frozen.waitLog(t, `declared lost or replaced`)
	v = waitFor("the end", func(v projections.ExecutionView) bool { return v.Status.Terminal() })
	if v.Status != domain.StatusCompleted || v.Worker != "w2" || v.Attempt != 2 {
		t.Errorf("the execution ended %s on %s attempt %d, want completed on w2 attempt 2", v.Status, v.Worker, v.Attempt)
	}
	time.Sleep(time.Second) // give w1 time to (try to) write anything late
	api.terminate(t)
	frozen.terminate(t)
	other.terminate(t)

	store, err := postgres.OpenURL(ctx, storeURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	evs, err := store.ReadStream(ctx, domain.ExecutionStream(acc.ID), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	ends, lostAt := 0, -1
	for i := range evs {
		ev, err := codec.Events.Decode(&evs[i])
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.(type) {
		case domain.ExecutionAbandoned:
			lostAt = i
		case domain.ExecutionRunning:
			if e.Worker == "w1" && lostAt >= 0 {
				t.Errorf("w1 wrote running after it was declared lost (version %d)", evs[i].Version)
			}
		}
		if evs[i].Writer == "w1" && lostAt >= 0 && i > lostAt {
			t.Errorf("w1 wrote %s at version %d after its execution was taken back", evs[i].Type, evs[i].Version)
		}
		switch evs[i].Type {
		case domain.TypeExecutionCompleted, domain.TypeExecutionFailed, domain.TypeExecutionTimedOut,
			domain.TypeExecutionCancelled, domain.TypeExecutionRejected:
			ends++
		}
	}
	if ends != 1 {
		t.Errorf("%d terminal events, want 1: %v", ends, types(evs))
	}
	if lostAt < 0 {
		t.Errorf("no execution.abandoned in the stream: %v", types(evs))
	}
	auditLog(ctx, t, store)
	w1, err := store.ReadStream(ctx, domain.WorkerStream("w1"), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	registered, lost := 0, 0
	for i := range w1 {
		switch w1[i].Type {
		case domain.TypeWorkerRegistered:
			registered++
		case domain.TypeWorkerLost:
			lost++
		}
	}
	if lost == 0 || registered < 2 {
		t.Errorf("w1's stream: %d registrations, %d lost verdicts; want a verdict and a new incarnation after it: %v", registered, lost, types(w1))
	}
	t.Logf("schema %s: execution %s: %v", schema, acc.ID, types(evs))
}

func types(evs []domain.Envelope) []string {
	out := make([]string, len(evs))
	for i := range evs {
		out[i] = fmt.Sprintf("%s(%s)", evs[i].Type, evs[i].Writer)
	}
	return out
}
