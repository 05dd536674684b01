package projections_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
)

// cancelLog writes a log of action "c" (key "k", max_concurrent 1) where
// execution a1 (key "a") runs and the executor asks it to cancel; mutate
// says what else the log holds.
func cancelLog(t *testing.T, mutate string) *projections.AuditReport {
	t.Helper()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.Options{Clock: func() time.Time { now = now.Add(time.Millisecond); return now }})
	w := logWriter{t, store}
	p := domain.Policy{Ref: "c", Runner: "core.noop", MaxConcurrent: 1, ConcurrencyKey: "k", OnLimit: domain.OnLimitCancelInProgress}.WithDefaults()
	if mutate == "on_limit queue" {
		p.OnLimit = domain.OnLimitQueue
	}
	w.put(domain.ActionStream("c"), domain.OwnerAPI, "", domain.ActionDefined{Policy: p})
	req := func(id, key string) {
		w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x",
			domain.ExecutionRequested{Action: "c", Input: json.RawMessage(`{"k":"` + key + `"}`)})
	}
	ex := func(id string, ev domain.Event) { w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", ev) }
	wk := func(id string, ev domain.Event) { w.put(domain.ExecutionStream(id), domain.OwnerWorker, "w1", ev) }
	req("a1", "a")
	w.put(domain.QueueStream("c"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: "a1", ConcurrencyKey: "a"})
	ex("a1", domain.ExecutionScheduling{ConcurrencyKey: "a"})
	ex("a1", domain.ExecutionScheduled{Worker: "w1", Attempt: 1, Action: "c", Runner: "core.noop"})
	wk("a1", domain.ExecutionRunning{Worker: "w1", Attempt: 1})
	switch mutate {
	case "no waiter":
	case "a waiter of another key":
		req("b1", "b")
	case "policy changed after the decision":
		// The executor decided on a position where a2 waited under
		// cancel_in_progress; the change committed before its cancellation.
		req("a2", "a")
		q := p
		q.OnLimit = domain.OnLimitQueue
		w.put(domain.ActionStream("c"), domain.OwnerAPI, "", domain.ActionPolicyChanged{Policy: q})
	default: // lawful; "on_limit queue"
		req("a2", "a")
	}
	ex("a1", domain.ExecutionCancelRequested{Reason: "on_limit cancel_in_progress"})
	wk("a1", domain.ExecutionCancelled{Reason: "cancelled"})
	return audit(t, store)
}

// TestAuditCancelInProgress: the audit justifies every cancellation the
// executor asks for (on an execution that is not a with_items child) by
// on_limit cancel_in_progress. Catches: an executor cancelling with no
// waiter of the key value, for a waiter of another key value, or for an
// action whose on_limit is queue (mutants of decideCancelInProgress that
// drop its checks); and an audit that would refuse the executor's lawful
// race with a policy change.
func TestAuditCancelInProgress(t *testing.T) {
	t.Parallel()
	for _, lawful := range []string{"", "policy changed after the decision"} {
		if rep := cancelLog(t, lawful); !rep.OK() || rep.Ended != 1 {
			t.Fatalf("lawful %q: %+v", lawful, rep)
		}
	}
	for mutate, want := range map[string]string{
		"no waiter":               `no waiter of action "c" key "a"`,
		"a waiter of another key": `no waiter of action "c" key "a"`,
		"on_limit queue":          `has on_limit "queue", not cancel_in_progress`,
	} {
		found := false
		for _, v := range cancelLog(t, mutate).Violations {
			found = found || (v.Rule == projections.RuleCancelInProgress && strings.Contains(v.Detail, want))
		}
		if !found {
			t.Errorf("%s: no %s violation saying %q: %+v", mutate, projections.RuleCancelInProgress, want, cancelLog(t, mutate).Violations)
		}
	}
}
