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

// countLog writes a log of action "c" (key "k", max_concurrent 3,
// cancel_in_progress) where a1, a2 and a3 of key value "a" run, then what
// steps say: "w<id>" a request of key "a" that waits, "x<id>" the
// executor's cancel_requested, "u<id>" the client's, "c<id>" the end
// (cancelled) of a waiter or of a run, "d<id>" a run's completion,
// "g<id>" a grant and start.
func countLog(t *testing.T, steps ...string) *projections.AuditReport {
	t.Helper()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.Options{Clock: func() time.Time { now = now.Add(time.Millisecond); return now }})
	w := logWriter{t, store}
	p := domain.Policy{Ref: "c", Runner: "core.noop", MaxConcurrent: 3, ConcurrencyKey: "k", OnLimit: domain.OnLimitCancelInProgress}.WithDefaults()
	w.put(domain.ActionStream("c"), domain.OwnerAPI, "", domain.ActionDefined{Policy: p})
	ex := func(id string, ev domain.Event) { w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", ev) }
	wk := func(id string, ev domain.Event) { w.put(domain.ExecutionStream(id), domain.OwnerWorker, "w1", ev) }
	running := map[string]bool{}
	req := func(id string) {
		ex(id, domain.ExecutionRequested{Action: "c", Input: json.RawMessage(`{"k":"a"}`)})
	}
	run := func(id string) {
		w.put(domain.QueueStream("c"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: id, ConcurrencyKey: "a"})
		ex(id, domain.ExecutionScheduling{ConcurrencyKey: "a"})
		ex(id, domain.ExecutionScheduled{Worker: "w1", Attempt: 1, Action: "c", Runner: "core.noop"})
		wk(id, domain.ExecutionRunning{Worker: "w1", Attempt: 1})
		running[id] = true
	}
	for _, id := range []string{"a1", "a2", "a3"} {
		req(id)
		run(id)
	}
	for _, s := range steps {
		id := s[1:]
		switch s[0] {
		case 'w':
			req(id)
		case 'x':
			ex(id, domain.ExecutionCancelRequested{Reason: "on_limit cancel_in_progress"})
		case 'u':
			w.put(domain.ExecutionStream(id), domain.OwnerAPI, "", domain.ExecutionCancelRequested{Reason: "by its client"})
		case 'c':
			if running[id] {
				wk(id, domain.ExecutionCancelled{Reason: "cancelled", Code: domain.CancelRequested})
			} else {
				ex(id, domain.ExecutionCancelled{Reason: "cancelled by its client"})
			}
		case 'd':
			wk(id, domain.ExecutionCompleted{})
		case 'g':
			run(id)
		default:
			t.Fatalf("step %q", s)
		}
	}
	return audit(t, store)
}

// TestAuditCancelInProgressCount: the audit counts the executor's
// cancellations outstanding in a key value (asked of runs that still hold
// their slot) against what its waiters need beyond the free slots, at the
// cancellation's position or since the run's grant. Catches: an executor
// that cancels a second run for one waiter while the first it asked still
// runs (mutant cip-recount-asked: every run of the key value cancelled for
// one request), or one more after a waiter it answered was granted, or
// one of a run granted after the waiters that once needed more had gone
// (mutant audit-cip-room-restarts: the older, larger room judges it); an
// audit without the count (mutant audit-cip-count-dropped); and an
// audit that refuses the lawful cases: as many cancellations as waiters,
// a waiter's end committed between the executor's decision and its
// cancellations, a client's cancellation of another run meanwhile (the
// executor counts it when it sees it, the audit counts only its own), and
// the next waiter after a cancelled run's slot went to the first.
func TestAuditCancelInProgressCount(t *testing.T) {
	t.Parallel()
	for _, steps := range [][]string{
		{"wa4", "xa1"},
		{"wa4", "wa5", "xa1", "xa2"},
		{"wa4", "wa5", "ca5", "xa1", "xa2"},        // a5 ended after the decision that saw it
		{"wa4", "xa1", "ua2"},                      // the client's own
		{"wa4", "xa1", "ca1", "ga4", "wa5", "xa2"}, // a1's slot went to a4; a5 needs a2's
		{"wa4", "xa1", "wa5", "xa2", "ca1", "ga4"}, // one each
		{"wa4", "wa5", "wa6", "xa1", "xa2", "xa3"}, // all three, for three waiters
	} {
		if rep := countLog(t, steps...); !rep.OK() {
			t.Errorf("lawful %v: %+v", steps, rep.Violations)
		}
	}
	for _, tc := range []struct {
		steps []string
		want  string
	}{
		{[]string{"wa4", "xa1", "xa2"}, `asked execution a2 to cancel beyond what the waiters of action "c" key "a" need: its cancellations there number 2 since the value last held no slot (2 outstanding), where its waiters beyond the free slots, less the runs asked already, left room for 1`},
		{[]string{"wa4", "xa1", "xa2", "xa3"}, `asked execution a2 to cancel beyond`},
		{[]string{"wa4", "wa5", "xa1", "xa2", "ca1", "ga4", "xa3"}, `asked execution a3 to cancel beyond what the waiters of action "c" key "a" need: its cancellations there number 3 since the value last held no slot (2 outstanding), where its waiters beyond the free slots, less the runs asked already, left room for 2`},
		{[]string{"wa4", "xa1", "ca1", "ga4", "wa5", "xa2", "xa3"}, `asked execution a3 to cancel beyond`},
		// Two waiters once, gone before a6's grant; a7 needs one run:
		// a2's cancellation answers it, a6's is one too many.
		{[]string{"wa4", "wa5", "ca4", "ca5", "da1", "wa6", "ga6", "wa7", "xa2", "xa6"}, `asked execution a6 to cancel beyond what the waiters of action "c" key "a" need: its cancellations there number 2 since the value last held no slot (2 outstanding), where its waiters beyond the free slots, less the runs asked already, left room for 1`},
	} {
		found := false
		vs := countLog(t, tc.steps...).Violations
		for _, v := range vs {
			found = found || (v.Rule == projections.RuleCancelInProgress && strings.Contains(v.Detail, tc.want))
		}
		if !found {
			t.Errorf("%v: no %s violation saying %q: %+v", tc.steps, projections.RuleCancelInProgress, tc.want, vs)
		}
	}
}
