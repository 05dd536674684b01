package executor_test

import (
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/runner"
)

// TestCancelInProgress: with on_limit cancel_in_progress a request whose
// key value has every slot taken gets one: the executor asks the oldest
// running execution of that value to cancel, its worker cancels it, and
// the new request is granted the freed slot. Another key value's run is
// untouched. Catches: on_limit cancel_in_progress refused or ignored (the
// new request waits behind the first), the wrong execution cancelled (the
// other key's), the cancellation not written by the executor.
func TestCancelInProgress(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	g := newGate()
	h.addWorker("w1", 4, time.Hour, map[string]runner.Runner{"test.job": g})
	h.define(domain.Policy{Ref: "cip", Runner: "test.job", MaxConcurrent: 1, ConcurrencyKey: "tenant", OnLimit: domain.OnLimitCancelInProgress})
	first := h.request("cip", `{"tenant":"a"}`)
	h.waitFor("the first to run", func() bool { return g.Waiting() == 1 })
	other := h.request("cip", `{"tenant":"b"}`)
	h.waitFor("b to run", func() bool { return g.Waiting() == 2 })
	second := h.request("cip", `{"tenant":"a"}`)
	h.advance(time.Second)
	checkCancelled(t, h, first, domain.OwnerWorker, "w1")
	asked := false
	for _, r := range h.stream(domain.ExecutionStream(first)) {
		if _, ok := r.ev.(domain.ExecutionCancelRequested); ok {
			asked = r.env.Owner == domain.OwnerExecutor
		}
	}
	if !asked {
		t.Fatal("the first's cancel_requested is not the executor's")
	}
	h.waitStatus(second, domain.StatusRunning)
	if x := h.loaded(other); x.Status() != domain.StatusRunning {
		t.Fatalf("the other key's run: %s", x.Status())
	}
	g.ReleaseAll()
	h.waitStatus(second, domain.StatusCompleted)
	h.waitStatus(other, domain.StatusCompleted)
	h.auditClean()
}
