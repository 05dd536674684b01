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

// TestAuditTotalLimit: the audit checks max_concurrent_total and its round
// robin at every grant. Catches: the audit missing a grant beyond the
// total, or a round robin that passes a key value with a waiter twice
// (grants in request order across key values).
func TestAuditTotalLimit(t *testing.T) {
	t.Parallel()
	run := func(mutate string) *projections.AuditReport {
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		store := memstore.New(memstore.Options{Clock: func() time.Time { return now }})
		w := logWriter{t, store}
		p := domain.Policy{Ref: "t", Runner: "core.noop", MaxConcurrent: 3, MaxConcurrentTotal: 1, ConcurrencyKey: "k"}.WithDefaults()
		w.put(domain.ActionStream("t"), domain.OwnerAPI, "", domain.ActionDefined{Policy: p})
		req := func(id, key string) {
			w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x",
				domain.ExecutionRequested{Action: "t", Input: json.RawMessage(`{"k":"` + key + `"}`)})
		}
		grant := func(id, key string) {
			w.put(domain.QueueStream("t"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: id, ConcurrencyKey: key})
			w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionScheduling{ConcurrencyKey: key})
			w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionScheduled{Worker: "w1", Attempt: 1, Action: "t", Runner: "core.noop"})
		}
		for _, r := range [][2]string{{"a1", "a"}, {"a2", "a"}, {"a3", "a"}, {"b1", "b"}} {
			req(r[0], r[1])
		}
		switch mutate {
		case "over the total":
			grant("a1", "a")
			grant("b1", "b")
		case "request order":
			for _, id := range []string{"a1", "a2", "a3"} {
				grant(id, "a")
				w.run(id, "w1")
			}
		default:
			for _, r := range [][2]string{{"a1", "a"}, {"b1", "b"}, {"a2", "a"}, {"a3", "a"}} {
				grant(r[0], r[1])
				w.run(r[0], "w1")
			}
		}
		return audit(t, store)
	}
	if rep := run(""); !rep.OK() || rep.Ended != 4 {
		t.Fatalf("lawful: %+v", rep)
	}
	for mutate, want := range map[string]string{
		"over the total": "exceeds max_concurrent_total 1",
		"request order":  `skips key "b" a second time`,
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
