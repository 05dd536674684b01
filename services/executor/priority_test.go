package executor_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/runner"
)

func (h *harness) requestWith(r command.Request) string {
	h.t.Helper()
	id, _, err := h.cmds.Request(context.Background(), r)
	if err != nil {
		h.t.Fatal(err)
	}
	return id
}

// grantOrder returns the executions of the log's queue.granted events, in
// log order.
func (h *harness) grantOrder() []string {
	var out []string
	for _, r := range h.all() {
		if g, ok := r.ev.(domain.QueueGranted); ok {
			out = append(out, g.Execution)
		}
	}
	return out
}

// TestPriorityOrder: with one slot, waiters are granted by priority (1
// first), in request order within one priority, whatever order they were
// requested in; a key's queues are ordered apart.
func TestPriorityOrder(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.addWorker("w1", 4, time.Hour, nil)
	h.define(domain.Policy{Ref: "prio", Runner: runner.NameNoop, MaxConcurrent: 1})
	ctx := context.Background()
	if _, err := h.cmds.Pause(ctx, "prio", "fill the queue"); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range []int{3, 0, 1, 2, 4, 1} { // 0: the default, 2
		ids = append(ids, h.requestWith(command.Request{Action: "prio", Priority: p}))
	}
	h.quiesce()
	if _, err := h.cmds.Resume(ctx, "prio"); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		h.waitStatus(id, domain.StatusCompleted)
	}
	want := []string{ids[2], ids[5], ids[1], ids[3], ids[0], ids[4]}
	if got := h.grantOrder(); !slices.Equal(got, want) {
		t.Fatalf("granted %v\nwant    %v", got, want)
	}
	h.auditClean()
}

// TestDelayAndRunAt: a request with delay_seconds or run_at is granted
// only once its time has come by log time, and waits behind the requests
// already queued then; one whose run_at has passed is eligible at once.
func TestDelayAndRunAt(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.addWorker("w1", 4, time.Hour, nil)
	h.define(domain.Policy{Ref: "later", Runner: runner.NameNoop, MaxConcurrent: 4})
	delayed := h.requestWith(command.Request{Action: "later", DelaySeconds: 30})
	at := t0.Add(time.Minute)
	scheduled := h.requestWith(command.Request{Action: "later", RunAt: &at})
	past := t0.Add(-time.Hour)
	now := h.requestWith(command.Request{Action: "later", RunAt: &past})
	h.waitStatus(now, domain.StatusCompleted)
	h.advance(29 * time.Second)
	if x := h.loaded(delayed); x.Status() != domain.StatusRequested {
		t.Fatalf("delayed 30 s: %s after 29 s", x.Status())
	}
	h.advance(2 * time.Second)
	h.waitStatus(delayed, domain.StatusCompleted)
	if x := h.loaded(scheduled); x.Status() != domain.StatusRequested {
		t.Fatalf("run_at +60 s: %s after 31 s", x.Status())
	}
	h.advance(30 * time.Second)
	h.waitStatus(scheduled, domain.StatusCompleted)
	for _, id := range []string{delayed, scheduled} {
		var req, granted time.Time
		for _, r := range h.stream(domain.ExecutionStream(id)) {
			switch r.ev.(type) {
			case domain.ExecutionRequested:
				req = r.env.Time
			case domain.ExecutionScheduling:
				granted = r.env.Time
			}
		}
		if id == delayed && granted.Sub(req) < 30*time.Second || id == scheduled && granted.Before(at) {
			t.Fatalf("%s granted at %s, requested at %s", id, granted, req)
		}
	}
	if got := types(h.stream(domain.ExecutionStream(now))); slices.Contains(got, "requeued") {
		t.Fatalf("a past run_at was deferred: %v", got)
	}
	h.auditClean()
}
