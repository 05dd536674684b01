package executor_test

import (
	"context"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/executor"
	"github.com/turnstile/turnstile/services/repository"
)

// TestIdleWorkersStayQuiet: the lease rule of a quiet log (domain.Worker.Owe).
//
//   - A live worker that holds nothing writes nothing, and an hour of log
//     time later it is not lost: an idle worker's lease does not run.
//   - Handed work, it pays its debt with one heartbeat (it ran the work and
//     holds nothing again; on a single-stream log, two: the run's fence and
//     the debt that fence made, written while it held the run), and is
//     quiet again.
//   - A registered worker that died while idle (no process behind it) is
//     not lost while idle either; handed an execution an hour after its
//     last event, it is not lost one second before a lease has passed since
//     the handoff (not since its last event), and is lost once it has: the
//     verdict records the handoff's log time as the start of the debt and
//     the lease, and the execution is taken back (worker_lost).
//
// The audit, which checks every verdict against the lease by log time, is
// clean.
func TestIdleWorkersStayQuiet(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		const lease = 10 * time.Second
		ctx := context.Background()
		h := newHarness(t, harnessConfig{single: single, lease: lease})
		h.addWorker("w1", 2, 5*time.Millisecond, nil)
		h.define(domain.Policy{Ref: "quiet.noop", Runner: "core.noop"})
		count := func(id, typ string) int {
			n := 0
			for _, r := range h.stream(domain.WorkerStream(id)) {
				if r.env.Type == typ {
					n++
				}
			}
			return n
		}
		noVerdict := func(id string) {
			t.Helper()
			if n := count(id, domain.TypeWorkerLost); n != 0 {
				t.Fatalf("worker %s declared lost (%d verdicts)", id, n)
			}
		}

		h.advance(time.Hour)
		time.Sleep(50 * time.Millisecond) // w1 looks at its lease ten times meanwhile
		h.advance(time.Second)
		noVerdict("w1")
		if n := count("w1", domain.TypeWorkerHeartbeat); n != 0 {
			t.Fatalf("idle w1 wrote %d heartbeats, want none", n)
		}

		x := h.request("quiet.noop", "")
		h.waitStatus(x, domain.StatusCompleted)
		h.waitFor("w1 to pay its debt", func() bool {
			owes := true
			h.exec.Inspect(func(st *projections.State) { _, owes = st.Workers["w1"].OwedSince() })
			return !owes
		})
		// On a single-stream log the run's first write follows a heartbeat
		// (services/worker/serialfence.go), which pays the handoff's debt;
		// written while the worker holds the run, it makes one more.
		want := 1
		if single {
			want = 2
		}
		if n := count("w1", domain.TypeWorkerHeartbeat); n != want {
			t.Fatalf("w1 wrote %d heartbeats after one handoff, want %d (its debt paid once)", n, want)
		}
		h.advance(time.Hour)
		time.Sleep(50 * time.Millisecond)
		h.advance(time.Second)
		noVerdict("w1")
		if n := count("w1", domain.TypeWorkerHeartbeat); n != want {
			t.Fatalf("w1 wrote %d heartbeats, want still %d: it holds nothing", n, want)
		}

		// A worker that died while idle: a registration with no process.
		if _, err := repository.UpdateWorker(ctx, h.store, "ghost", domain.OwnerWorker, "ghost", nil, func(w *domain.Worker) (domain.Event, error) {
			return w.Register("ghost-1", 1, []string{"test.ghost"}, "nowhere", 1)
		}); err != nil {
			t.Fatal(err)
		}
		h.define(domain.Policy{Ref: "quiet.ghost", Runner: "test.ghost", MaxAttempts: 1})
		h.advance(time.Hour)
		noVerdict("ghost")
		g := h.request("quiet.ghost", "")
		handoff := h.waitEvent(domain.ExecutionStream(g), domain.TypeExecutionScheduled)
		handedAt := handoff[len(handoff)-1].env.Time
		h.advance(lease - time.Second)
		noVerdict("ghost")
		h.advance(time.Second)
		verdicts := h.waitEvent(domain.WorkerStream("ghost"), domain.TypeWorkerLost)
		v := verdicts[len(verdicts)-1].ev.(domain.WorkerLost)
		if !v.OwedSince.Equal(handedAt) || v.LeaseMillis != lease.Milliseconds() {
			t.Fatalf("verdict %+v, want owed since the handoff at %v and a lease of %s", v, handedAt, lease)
		}
		if f := h.waitStatus(g, domain.StatusFailed).State(); f.Code != domain.FailWorkerLost {
			t.Fatalf("the ghost's execution failed with code %q, want %q", f.Code, domain.FailWorkerLost)
		}
		noVerdict("w1")
		h.auditClean()
	})
}

// TestStandbyJudgesDebtsFromTheLog: the lease rule reads the log alone, so
// an executor that takes over judges as the active one did. A worker that
// died while idle (a registration with no process) is handed an execution
// by the active executor; the active one stops 6 s later and a standby
// takes over: it does not restart the debt at its own start (it would keep
// a dead worker alive a lease longer), it declares the worker lost one
// lease after the handoff, and it does not declare the live idle worker w1
// lost, an hour of log time later.
func TestStandbyJudgesDebtsFromTheLog(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		const lease = 10 * time.Second
		ctx := context.Background()
		h := newHarness(t, harnessConfig{single: single, lease: lease})
		standby, err := executor.New(executor.Config{Store: h.store, Clock: h.clock, Logger: h.log, Name: "standby",
			Tick: 5 * time.Millisecond, WorkerLease: lease, Standby: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := standby.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(standby.Stop)
		h.addWorker("w1", 2, 5*time.Millisecond, nil)
		if _, err := repository.UpdateWorker(ctx, h.store, "ghost", domain.OwnerWorker, "ghost", nil, func(w *domain.Worker) (domain.Event, error) {
			return w.Register("ghost-1", 1, []string{"test.ghost"}, "nowhere", 1)
		}); err != nil {
			t.Fatal(err)
		}
		h.define(domain.Policy{Ref: "quiet.ghost", Runner: "test.ghost", MaxAttempts: 1})
		g := h.request("quiet.ghost", "")
		h.waitEvent(domain.ExecutionStream(g), domain.TypeExecutionScheduled)
		h.advance(6 * time.Second)

		h.exec.Stop()
		standby.SetActive(true)
		// decided waits until the standby has folded the log and decided
		// twice on the clock as it is now.
		decided := func() {
			t.Helper()
			head, err := h.store.Head(ctx)
			if err != nil {
				t.Fatal(err)
			}
			h.waitFor("the standby to fold the log", func() bool { return standby.Position() >= head })
			target := standby.Stats.TimedCycles.Load() + 2
			h.waitFor("the standby's cycles", func() bool { return standby.Stats.TimedCycles.Load() >= target })
		}
		lost := func(id string) bool {
			for _, r := range h.stream(domain.WorkerStream(id)) {
				if r.env.Type == domain.TypeWorkerLost {
					return true
				}
			}
			return false
		}
		h.clock.Advance(3 * time.Second) // 9 s after the handoff
		decided()
		if lost("ghost") {
			t.Fatal("the standby declared the ghost lost before a lease had passed since the handoff")
		}
		h.clock.Advance(time.Second) // a lease after the handoff, 4 s after the takeover
		h.waitFor("the standby's verdict on the ghost", func() bool { return lost("ghost") })
		h.clock.Advance(time.Hour)
		decided()
		if lost("w1") {
			t.Fatal("the standby declared the idle worker w1 lost")
		}
		if f := h.waitStatus(g, domain.StatusFailed).State(); f.Code != domain.FailWorkerLost {
			t.Fatalf("the ghost's execution failed with code %q, want %q", f.Code, domain.FailWorkerLost)
		}
		h.auditClean()
	})
}

// TestHoldingWorkerOwesAfterEachHeartbeat: a worker that holds an execution
// owes the log a sign of life again from each of its heartbeats: one that
// paid once and then died holding the execution is lost one lease after
// that heartbeat, not kept alive by it.
func TestHoldingWorkerOwesAfterEachHeartbeat(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		const lease = 10 * time.Second
		ctx := context.Background()
		h := newHarness(t, harnessConfig{single: single, lease: lease})
		register := func(w *domain.Worker) (domain.Event, error) {
			return w.Register("ghost-1", 1, []string{"test.ghost"}, "nowhere", 1)
		}
		if _, err := repository.UpdateWorker(ctx, h.store, "ghost", domain.OwnerWorker, "ghost", nil, register); err != nil {
			t.Fatal(err)
		}
		h.define(domain.Policy{Ref: "quiet.ghost", Runner: "test.ghost", MaxAttempts: 1})
		g := h.request("quiet.ghost", "")
		h.waitEvent(domain.ExecutionStream(g), domain.TypeExecutionScheduled)
		h.advance(5 * time.Second)
		if _, err := repository.UpdateWorker(ctx, h.store, "ghost", domain.OwnerWorker, "ghost", nil, func(w *domain.Worker) (domain.Event, error) {
			return w.Heartbeat("ghost-1", 1)
		}); err != nil {
			t.Fatal(err)
		}
		beat := h.clock.Now()
		lost := func() bool {
			for _, r := range h.stream(domain.WorkerStream("ghost")) {
				if r.env.Type == domain.TypeWorkerLost {
					return true
				}
			}
			return false
		}
		h.advance(lease - time.Second)
		if lost() {
			t.Fatal("declared lost before a lease had passed since its heartbeat")
		}
		h.advance(time.Second)
		verdicts := h.waitEvent(domain.WorkerStream("ghost"), domain.TypeWorkerLost)
		if v := verdicts[len(verdicts)-1].ev.(domain.WorkerLost); !v.OwedSince.Equal(beat) {
			t.Fatalf("verdict %+v, want owed since the heartbeat at %v", v, beat)
		}
		h.waitStatus(g, domain.StatusFailed)
		h.auditClean()
	})
}
