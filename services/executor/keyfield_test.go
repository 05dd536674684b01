package executor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/runner"
)

// TestConcurrencyKeyWithBuiltinRunners is issue 18's report, end to end: an
// action on core.sleep / core.fail with concurrency_key "tenant" runs a
// request whose input carries "tenant" (the handoff names the key field,
// the runner ignores it), and still refuses any other unknown field.
func TestConcurrencyKeyWithBuiltinRunners(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.addWorker("w1", 4, time.Hour, nil)
	h.define(domain.Policy{Ref: "key.sleep", Runner: runner.NameSleep, MaxConcurrent: 1, ConcurrencyKey: "tenant"})
	h.define(domain.Policy{Ref: "key.fail", Runner: runner.NameFail, MaxConcurrent: 1, ConcurrencyKey: "tenant"})

	ok := h.request("key.sleep", `{"seconds":0.01,"tenant":"a"}`)
	if x := h.waitStatus(ok, domain.StatusCompleted).State(); !strings.Contains(string(x.Result), `"slept_seconds":0.01`) {
		t.Fatalf("result %s", x.Result)
	}
	var sched domain.ExecutionScheduled
	for _, r := range h.stream(domain.ExecutionStream(ok)) {
		if s, found := r.ev.(domain.ExecutionScheduled); found {
			sched = s
		}
	}
	if sched.KeyField != "tenant" {
		t.Fatalf("execution.scheduled carries key_field %q, want tenant", sched.KeyField)
	}

	failed := h.request("key.fail", `{"message":"boom","tenant":"b"}`)
	if x := h.waitStatus(failed, domain.StatusFailed).State(); x.Error != "boom" {
		t.Fatalf("error %q, want boom (the key field ignored)", x.Error)
	}
	extra := h.request("key.sleep", `{"seconds":0,"tenant":"a","extra":1}`)
	if x := h.waitStatus(extra, domain.StatusFailed).State(); !strings.Contains(x.Error, `unknown field "extra"`) {
		t.Fatalf("error %q, want the other unknown field refused", x.Error)
	}
	h.auditClean()
}
