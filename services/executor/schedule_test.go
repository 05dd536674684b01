package executor_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/runner"
)

// tickRequests lists the ticks (FormatTick) schedule ref's executions were
// requested for, in log order, checking each id is the tick's derived id.
func (h *harness) tickRequests(ref string) []string {
	h.t.Helper()
	var out []string
	for _, r := range h.all() {
		e, ok := r.ev.(domain.ExecutionRequested)
		if !ok || e.Schedule != ref {
			continue
		}
		at, err := time.Parse(time.RFC3339, e.Tick)
		if err != nil {
			h.t.Fatalf("tick %q: %v", e.Tick, err)
		}
		if _, id := domain.SplitStream(r.env.Stream); id != domain.ScheduleTickID(ref, at) {
			h.t.Fatalf("tick %s requested as %s, not its derived id", e.Tick, id)
		}
		out = append(out, e.Tick)
	}
	return out
}

func minute(m int) string { return domain.FormatTick(time.Date(2026, 1, 2, 3, m, 0, 0, time.UTC)) }

// TestScheduleTicksOnce: a schedule every minute (t0 is 03:04:05) requests
// one execution per tick with the fake clock, each run to completion;
// restarting the executor requests nothing again; ticks missed while no
// executor runs give one catch-up run, for the latest; ticks while paused
// are never requested, nor any after the deletion. The audit finds nothing.
func TestScheduleTicksOnce(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.addWorker("w1", 4, time.Hour, nil)
	h.define(domain.Policy{Ref: "cron.noop", Runner: runner.NameNoop})
	ctx := context.Background()
	if _, err := h.cmds.DefineSchedule(ctx, command.Schedule{Ref: "every.minute", Action: "cron.noop", Cron: "* * * * *", Input: json.RawMessage(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	want := []string{}
	check := func(when string) {
		t.Helper()
		h.quiesce()
		if got := h.tickRequests("every.minute"); !slices.Equal(got, want) {
			t.Fatalf("%s: ticks requested %v, want %v", when, got, want)
		}
	}
	h.advance(50 * time.Second) // 03:04:55: no tick yet
	check("before the first tick")
	h.advance(10 * time.Second) // 03:05:05
	want = append(want, minute(5))
	check("first tick")
	h.waitStatus(domain.ScheduleTickID("every.minute", time.Date(2026, 1, 2, 3, 5, 0, 0, time.UTC)), domain.StatusCompleted)
	h.advance(time.Minute) // 03:06:05
	want = append(want, minute(6))
	check("second tick")

	// A restart requests no tick twice.
	h.exec.Stop()
	h.exec = nil
	h.startExecutor()
	h.cycles(3)
	check("after a restart")

	// Down over five ticks: one catch-up run, for the latest (03:11).
	h.exec.Stop()
	h.exec = nil
	h.clock.Advance(5*time.Minute + 30*time.Second) // 03:11:35
	h.startExecutor()
	h.cycles(3)
	want = append(want, minute(11))
	check("after five missed ticks")

	if _, err := h.cmds.PauseSchedule(ctx, "every.minute"); err != nil {
		t.Fatal(err)
	}
	h.advance(2 * time.Minute) // 03:13:35: 03:12 and 03:13 fall while paused
	check("paused")
	if _, err := h.cmds.ResumeSchedule(ctx, "every.minute"); err != nil {
		t.Fatal(err)
	}
	h.advance(time.Minute) // 03:14:35
	want = append(want, minute(14))
	check("resumed: the ticks while paused are not caught up")

	if _, err := h.cmds.DeleteSchedule(ctx, "every.minute"); err != nil {
		t.Fatal(err)
	}
	h.advance(3 * time.Minute)
	check("deleted")
	h.auditClean()
}

// TestScheduleTwoExecutors: two executors deciding at once on one log (a
// fail-over's overlap) request each tick once: they write the same event to
// the tick's stream, expected new.
func TestScheduleTwoExecutors(t *testing.T) {
	h := newHarness(t, harnessConfig{executors: 2})
	h.define(domain.Policy{Ref: "cron.noop", Runner: runner.NameNoop})
	if _, err := h.cmds.DefineSchedule(context.Background(), command.Schedule{Ref: "s", Action: "cron.noop", Cron: "*/10 * * * * *"}); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		h.advance(10 * time.Second)
	}
	h.quiesce()
	got := h.tickRequests("s")
	if len(got) != 6 {
		t.Fatalf("ticks %v, want 6 (one per 10 s)", got)
	}
	seen := map[string]bool{}
	for _, tk := range got {
		if seen[tk] {
			t.Fatalf("tick %s requested twice: %v", tk, got)
		}
		seen[tk] = true
	}
	h.auditClean()
}

// TestAuditScheduleTick: the audit reports a tick's execution whose id is
// not the tick's derived id (a second execution for the tick).
func TestAuditScheduleTick(t *testing.T) {
	h := newHarness(t, harnessConfig{noExecutor: true})
	id := "0190a9b2-0000-7000-8000-000000000001"
	ev := domain.ExecutionRequested{Action: "a", Schedule: "s", Tick: minute(5)}
	env, err := codec.Events.Encode(uuid.New(), ev, domain.OwnerExecutor, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Append(context.Background(), domain.ExecutionStream(id), eventstore.NoStream, env); err != nil {
		t.Fatal(err)
	}
	rep, err := projections.Audit(context.Background(), h.store, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) != 1 || rep.Violations[0].Rule != projections.RuleScheduleTick {
		t.Fatalf("violations %+v, want one %s", rep.Violations, projections.RuleScheduleTick)
	}
}
