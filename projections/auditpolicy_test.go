package projections_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
)

// retryLog writes a log with a manual clock: an action with retry
// {max_attempts 2, backoff 10 s}, one execution whose first run failed.
// mutate changes the rest of its history; the audit's verdict is checked.
func retryLog(t *testing.T, mutate string) *projections.AuditReport {
	t.Helper()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.Options{Clock: func() time.Time { return now }})
	w := logWriter{t, store}
	p := domain.Policy{Ref: "r", Runner: "core.fail", MaxAttempts: 1,
		Retry: &domain.RetryPolicy{MaxAttempts: 2, BackoffSeconds: 10}}.WithDefaults()
	w.put(domain.ActionStream("r"), domain.OwnerAPI, "", domain.ActionDefined{Policy: p})
	xs := domain.ExecutionStream("e1")
	ex := func(ev domain.Event) { w.put(xs, domain.OwnerExecutor, "x", ev) }
	wk := func(ev domain.Event) { w.put(xs, domain.OwnerWorker, "w1", ev) }
	hand := func(attempt int) {
		w.put(domain.QueueStream("r"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: "e1"})
		ex(domain.ExecutionScheduling{})
		ex(domain.ExecutionScheduled{Worker: "w1", Attempt: attempt, Action: "r", Runner: "core.fail", Runs: 2})
		wk(domain.ExecutionRunning{Worker: "w1", Attempt: attempt})
	}
	w.request("e1", "r")
	hand(1)
	switch mutate {
	case "retry without a failed run": // taken back from a lost worker, not a failed run
		ex(domain.ExecutionAbandoned{Worker: "w1", Attempt: 1})
		ex(domain.ExecutionRetryScheduled{Attempt: 1, BackoffMillis: 10_000, Action: "r"})
		return audit(t, store)
	case "run_failed on the last run":
		wk(domain.ExecutionRunFailed{Worker: "w1", Attempt: 1, Error: "boom"})
		ex(domain.ExecutionRetryScheduled{Attempt: 1, BackoffMillis: 10_000, Action: "r"})
		now = now.Add(10 * time.Second)
		ex(domain.ExecutionRequeued{Action: "r"})
		hand(2)
		wk(domain.ExecutionRunFailed{Worker: "w1", Attempt: 2, Error: "boom"})
		return audit(t, store)
	}
	wk(domain.ExecutionRunFailed{Worker: "w1", Attempt: 1, Error: "boom"})
	ex(domain.ExecutionRetryScheduled{Attempt: 1, BackoffMillis: 10_000, Action: "r"})
	switch mutate {
	case "grant while backing off":
		now = now.Add(time.Minute)
		hand(2)
	case "requeued before the backoff ends":
		now = now.Add(9 * time.Second)
		ex(domain.ExecutionRequeued{Action: "r"})
		hand(2)
	case "a third attempt":
		now = now.Add(10 * time.Second)
		ex(domain.ExecutionRequeued{Action: "r"})
		hand(2)
		w.put(xs, domain.OwnerExecutor, "x", domain.ExecutionAbandoned{Worker: "w1", Attempt: 2})
		ex(domain.ExecutionScheduled{Worker: "w1", Attempt: 3, Action: "r", Runner: "core.fail", Runs: 2})
	default: // lawful
		now = now.Add(10 * time.Second)
		ex(domain.ExecutionRequeued{Action: "r"})
		hand(2)
		wk(domain.ExecutionFailed{Error: "boom"})
	}
	return audit(t, store)
}

func audit(t *testing.T, store *memstore.Store) *projections.AuditReport {
	t.Helper()
	rep, err := projections.Audit(context.Background(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestAuditRetries: a lawful retry passes; each way of breaking the retry
// rules is found (the mutant of the executor or worker that would write it
// fails this test).
func TestAuditRetries(t *testing.T) {
	t.Parallel()
	if rep := retryLog(t, ""); !rep.OK() || rep.Ended != 1 {
		t.Fatalf("lawful retry: %+v", rep)
	}
	for mutate, want := range map[string]string{
		"grant while backing off":          "not waiting",
		"requeued before the backoff ends": "before it is due",
		"a third attempt":                  "allows 2",
		"run_failed on the last run":       "allows 2 runs",
		"retry without a failed run":       "has no failed run",
	} {
		rep := retryLog(t, mutate)
		found := false
		for _, v := range rep.Violations {
			found = found || strings.Contains(v.Detail, want)
		}
		if !found {
			t.Errorf("%s: no violation saying %q in %+v", mutate, want, rep.Violations)
		}
	}
}

// TestAuditPrioritiesAndDelays: a grant that passes a waiting request of a
// higher priority, and a grant of a delayed request before it is due
// (never requeued, or requeued early), are found; lawful ones pass.
func TestAuditPrioritiesAndDelays(t *testing.T) {
	t.Parallel()
	run := func(mutate string) *projections.AuditReport {
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		store := memstore.New(memstore.Options{Clock: func() time.Time { return now }})
		w := logWriter{t, store}
		w.action("p", 1)
		req := func(id string, prio int, delay int64) {
			w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionRequested{Action: "p", Priority: prio, DelayMillis: delay})
		}
		req("low", 3, 0)
		req("high", 1, 0)
		req("later", 1, 60_000)
		switch mutate {
		case "passes a higher priority":
			w.grant("low", "p", "w1")
		case "grants a delayed request":
			w.grant("later", "p", "w1")
		case "requeues early":
			now = now.Add(59 * time.Second)
			w.put(domain.ExecutionStream("later"), domain.OwnerExecutor, "x", domain.ExecutionRequeued{Action: "p", Priority: 1})
		default:
			w.grant("high", "p", "w1")
			w.run("high", "w1")
			now = now.Add(time.Minute)
			w.put(domain.ExecutionStream("later"), domain.OwnerExecutor, "x", domain.ExecutionRequeued{Action: "p", Priority: 1})
			w.grant("later", "p", "w1") // priority 1, requeued after "low" was requested: still first
			w.run("later", "w1")
			w.grant("low", "p", "w1")
			w.run("low", "w1")
		}
		return audit(t, store)
	}
	if rep := run(""); !rep.OK() || rep.Ended != 3 {
		t.Fatalf("lawful: %+v", rep)
	}
	for mutate, want := range map[string]string{
		"passes a higher priority": "passes high of priority 1",
		"grants a delayed request": "grant of later: not waiting",
		"requeues early":           "before it is due",
	} {
		found := false
		for _, v := range run(mutate).Violations {
			found = found || strings.Contains(v.Detail, want)
		}
		if !found {
			t.Errorf("%s: no violation saying %q", mutate, want)
		}
	}
}
