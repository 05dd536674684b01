package executor_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/runner"
)

// TestRetryBacksOffByLogTime: a core.fail action with retry {max_attempts
// 3, backoff 10s × 2} runs three times: after run 1 it backs off 10 s and
// after run 2 20 s of log time, holding no slot (another execution of the
// action, max_concurrent 1, runs meanwhile), and ends failed only after
// its third run. The audit finds nothing wrong.
func TestRetryBacksOffByLogTime(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.addWorker("w1", 4, time.Hour, nil)
	h.define(domain.Policy{Ref: "retry.fail", Runner: runner.NameFail, MaxConcurrent: 1,
		Retry: &domain.RetryPolicy{MaxAttempts: 3, BackoffSeconds: 10, BackoffMultiplier: 2, MaxBackoffSeconds: 60}})
	id := h.request("retry.fail", `{"message":"boom"}`)
	h.waitEvent(domain.ExecutionStream(id), domain.TypeExecutionRetryScheduled)
	h.quiesce()

	// Backing off: no slot held, so another request runs at once.
	other := h.request("retry.fail", `{"message":"other"}`)
	h.waitEvent(domain.ExecutionStream(other), domain.TypeExecutionRunFailed)
	if x := h.loaded(id); x.Status() != domain.StatusRequested || x.Attempt() != 1 {
		t.Fatalf("while backing off: %s attempt %d, want requested attempt 1", x.Status(), x.Attempt())
	}

	h.advance(9 * time.Second) // not yet: 10 s after the retry_scheduled
	if x := h.loaded(id); x.Attempt() != 1 {
		t.Fatalf("ran again after 9 s of a 10 s backoff (attempt %d)", x.Attempt())
	}
	h.advance(2 * time.Second)
	h.waitFor("the second run to fail", func() bool { return h.loaded(id).Attempt() == 2 && h.loaded(id).Status() == domain.StatusRequested })
	h.advance(19 * time.Second) // the second backoff is 20 s
	if x := h.loaded(id); x.Attempt() != 2 {
		t.Fatalf("ran again after 19 s of a 20 s backoff (attempt %d)", x.Attempt())
	}
	h.advance(2 * time.Second)
	x := h.waitStatus(id, domain.StatusFailed)
	if x.Attempt() != 3 || x.State().Error != "boom" {
		t.Fatalf("ended after attempt %d with %q, want attempt 3 and boom", x.Attempt(), x.State().Error)
	}
	got := types(h.stream(domain.ExecutionStream(id)))
	want := []string{"requested", "scheduling", "scheduled", "running", "run_failed", "retry_scheduled", "requeued",
		"scheduling", "scheduled", "running", "run_failed", "retry_scheduled", "requeued",
		"scheduling", "scheduled", "running", "failed"}
	if !slices.Equal(got, want) {
		t.Fatalf("stream\n%v\nwant\n%v", got, want)
	}
	// The backoffs, by log time: requeued at or after retry_scheduled + backoff.
	recs := h.stream(domain.ExecutionStream(id))
	var since time.Time
	var backoffs []time.Duration
	for _, r := range recs {
		switch e := r.ev.(type) {
		case domain.ExecutionRetryScheduled:
			since = r.env.Time
			backoffs = append(backoffs, time.Duration(e.BackoffMillis)*time.Millisecond)
		case domain.ExecutionRequeued:
			if d := r.env.Time.Sub(since); d < backoffs[len(backoffs)-1] {
				t.Fatalf("requeued %s after retry_scheduled, backoff %s", d, backoffs[len(backoffs)-1])
			}
		}
	}
	if !slices.Equal(backoffs, []time.Duration{10 * time.Second, 20 * time.Second}) {
		t.Fatalf("backoffs %v, want [10s 20s]", backoffs)
	}
	h.auditClean()
}

// TestRetrySucceedsAndCancels: a run that succeeds ends the execution
// (no retry); a cancellation while backing off ends it cancelled, by the
// executor; without retry a failure is final.
func TestRetryCancelWhileDeferred(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.addWorker("w1", 4, time.Hour, nil)
	h.define(domain.Policy{Ref: "retry.c", Runner: runner.NameFail,
		Retry: &domain.RetryPolicy{MaxAttempts: 5, BackoffSeconds: 60}})
	h.define(domain.Policy{Ref: "noretry", Runner: runner.NameFail})
	id := h.request("retry.c", `{}`)
	h.waitEvent(domain.ExecutionStream(id), domain.TypeExecutionRetryScheduled)
	if err := h.cmds.RequestCancel(context.Background(), id, "stop"); err != nil {
		t.Fatal(err)
	}
	if x := h.waitStatus(id, domain.StatusCancelled); x.Attempt() != 1 {
		t.Fatalf("cancelled after attempt %d", x.Attempt())
	}
	plain := h.request("noretry", `{}`)
	h.waitStatus(plain, domain.StatusFailed)
	if got := types(h.stream(domain.ExecutionStream(plain))); slices.Contains(got, "run_failed") {
		t.Fatalf("an action without retry wrote %v", got)
	}
	h.quiesce()
	h.auditClean()
}
