package executor_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/runner"
)

// explain folds the whole log into the fold the executor decides with and
// explains execution id at the harness's time.
func (h *harness) explain(id string) projections.Explanation {
	h.t.Helper()
	envs, err := h.store.ReadAll(context.Background(), 0, 10_000_000)
	if err != nil {
		h.t.Fatal(err)
	}
	st := projections.NewState()
	for i := range envs {
		if err := st.Apply(&envs[i]); err != nil {
			h.t.Fatal(err)
		}
	}
	e, ok := st.Explain(id, h.clock.Now())
	if !ok {
		h.t.Fatalf("explain %s: not in the fold", id)
	}
	return e
}

func wantExplained(t *testing.T, what string, e projections.Explanation, status domain.Status, position int, reasons ...string) {
	t.Helper()
	if reasons == nil {
		reasons = []string{}
	}
	if e.Status != status || e.Position != position || e.Ahead != max(position-1, 0) || !slices.Equal(e.WaitingFor, reasons) {
		t.Fatalf("%s: explained %+v, want %s position %d waiting for %v", what, e, status, position, reasons)
	}
}

// TestExplainAgreesWithTheExecutor: what explain says of a waiter is what
// the executor then does: no worker, a pause, the slot, a higher priority,
// a delay and a backoff each hold it, and the waiter explained next with
// nothing in its way is the one granted next.
func TestExplainAgreesWithTheExecutor(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ctx := context.Background()
	h.define(domain.Policy{Ref: "ex", Runner: runner.NameNoop, MaxConcurrent: 1})
	a := h.requestWith(command.Request{Action: "ex"})
	b := h.requestWith(command.Request{Action: "ex", Priority: 1})
	c := h.requestWith(command.Request{Action: "ex", DelaySeconds: 60})
	h.quiesce()
	wantExplained(t, "b, no worker", h.explain(b), domain.StatusRequested, 1, projections.WaitNoWorker)
	wantExplained(t, "a, behind b", h.explain(a), domain.StatusRequested, 2,
		projections.WaitSlot, projections.WaitPriority, projections.WaitNoWorker)
	wantExplained(t, "c, delayed", h.explain(c), domain.StatusRequested, 0, projections.WaitRunAt)
	if got := h.grantOrder(); len(got) != 0 {
		t.Fatalf("granted %v with no worker", got)
	}

	if _, err := h.cmds.Pause(ctx, "ex", "hold"); err != nil {
		t.Fatal(err)
	}
	h.addWorker("w1", 4, time.Hour, nil)
	h.quiesce()
	wantExplained(t, "b, paused", h.explain(b), domain.StatusRequested, 1, projections.WaitPaused)
	if got := h.grantOrder(); len(got) != 0 {
		t.Fatalf("granted %v while paused", got)
	}
	if _, err := h.cmds.Resume(ctx, "ex"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(a, domain.StatusCompleted)
	if got := h.grantOrder(); !slices.Equal(got, []string{b, a}) {
		t.Fatalf("granted %v, explain said b then a", got)
	}
	h.advance(61 * time.Second)
	h.waitStatus(c, domain.StatusCompleted)

	h.define(domain.Policy{Ref: "ex.retry", Runner: runner.NameFail, Retry: &domain.RetryPolicy{MaxAttempts: 2, BackoffSeconds: 60}})
	r := h.request("ex.retry", `{}`)
	h.waitEvent(domain.ExecutionStream(r), domain.TypeExecutionRetryScheduled)
	wantExplained(t, "r, backing off", h.explain(r), domain.StatusRequested, 0, projections.WaitBackoff)
	h.quiesce()
	h.auditClean()
}
