package executor_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/runner"
)

// TestTotalLimitRoundRobin: with max_concurrent_total the executor grants
// the key values in turn (sorted, from after the last grant), FIFO within
// a value, never more than the total at once, and the audit finds the log
// clean. Catches: grants in request order across key values (the round
// robin ignored), grants beyond the total (max_concurrent alone), the
// executor re-sorting a queue's round by request order.
func TestTotalLimitRoundRobin(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.addWorker("w1", 8, time.Hour, nil)
	h.define(domain.Policy{Ref: "fair", Runner: runner.NameNoop, MaxConcurrent: 4, MaxConcurrentTotal: 2, ConcurrencyKey: "tenant"})
	ctx := context.Background()
	if _, err := h.cmds.Pause(ctx, "fair", "fill the queue"); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, k := range []string{"a", "a", "a", "a", "b", "b", "c"} {
		ids = append(ids, h.requestWith(command.Request{Action: "fair", Input: json.RawMessage(`{"tenant":"` + k + `"}`)}))
	}
	h.quiesce()
	if _, err := h.cmds.Resume(ctx, "fair"); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		h.waitStatus(id, domain.StatusCompleted)
	}
	a1, a2, a3, a4, b1, b2, c1 := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6]
	want := []string{a1, b1, c1, a2, b2, a3, a4}
	if got := h.grantOrder(); !slices.Equal(got, want) {
		t.Fatalf("granted %v\nwant    %v", got, want)
	}
	h.auditClean()
}

// TestExplainTotalSlot: explain names total_slot for the waiter the total
// limit holds (a key value before its own takes the one free total slot),
// not for the one the round serves next, and the executor grants in that
// order. Catches: total_slot never given, or given to the next in turn.
func TestExplainTotalSlot(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.define(domain.Policy{Ref: "tot", Runner: runner.NameNoop, MaxConcurrent: 2, MaxConcurrentTotal: 1, ConcurrencyKey: "tenant"})
	b := h.requestWith(command.Request{Action: "tot", Input: json.RawMessage(`{"tenant":"b"}`)})
	a := h.requestWith(command.Request{Action: "tot", Input: json.RawMessage(`{"tenant":"a"}`)})
	h.quiesce()
	wantExplained(t, "a, first in the round", h.explain(a), domain.StatusRequested, 1, projections.WaitNoWorker)
	wantExplained(t, "b, after a in the round", h.explain(b), domain.StatusRequested, 1, projections.WaitTotalSlot, projections.WaitNoWorker)
	h.addWorker("w1", 4, time.Hour, nil)
	h.waitStatus(b, domain.StatusCompleted)
	if got := h.grantOrder(); !slices.Equal(got, []string{a, b}) {
		t.Fatalf("granted %v, explain said a then b", got)
	}
	h.auditClean()
}
