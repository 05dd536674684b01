package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/runner"
)

// lastEvent returns an execution stream's last event.
func (h *harness) lastEvent(id string) rec {
	h.t.Helper()
	evs := h.stream(domain.ExecutionStream(id))
	return evs[len(evs)-1]
}

func (h *harness) cancel(id string) {
	h.t.Helper()
	if err := h.cmds.RequestCancel(context.Background(), id, "test"); err != nil {
		h.t.Fatal(err)
	}
}

// checkCancelled checks the end of a cancelled execution: its last event is
// execution.cancelled with code requested, written by owner (and writer).
func checkCancelled(t *testing.T, h *harness, id string, owner domain.Owner, writer string) domain.ExecutionCancelled {
	t.Helper()
	h.waitStatus(id, domain.StatusCancelled)
	last := h.lastEvent(id)
	c, ok := last.ev.(domain.ExecutionCancelled)
	if !ok || c.Code != domain.CancelRequested || last.env.Owner != owner || (writer != "" && last.env.Writer != writer) {
		t.Fatalf("last event %s %+v by %s %s, want execution.cancelled (requested) by %s %s", last.env.Type, last.ev, last.env.Owner, last.env.Writer, owner, writer)
	}
	return c
}

// TestCancelInEveryState: a cancellation request ends an execution in every
// state before its end, each time by the owner the handoff rule names, and is
// a typed no-op afterwards.
func TestCancelInEveryState(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		t.Run("waiting", func(t *testing.T) {
			h := newHarness(t, harnessConfig{single: single})
			g := newGate()
			h.addWorker("w1", 4, time.Hour, map[string]runner.Runner{"test.job": g})
			h.define(domain.Policy{Ref: "c.wait", Runner: "test.job", MaxConcurrent: 1})
			first := h.request("c.wait", "")
			waiter := h.request("c.wait", "")
			h.waitFor("the first to run", func() bool { return g.Waiting() == 1 })
			h.settle()
			h.cancel(waiter)
			checkCancelled(t, h, waiter, domain.OwnerExecutor, "")
			if got := types(h.stream(domain.ExecutionStream(waiter))); !slices.Equal(got, []string{"requested", "cancel_requested", "cancelled"}) {
				t.Fatalf("waiter %v", got)
			}
			h.settle()
			h.exec.Inspect(func(st *projections.State) {
				if q := st.Queues.Get("c.wait"); q.Waiting() != 0 || q.Active() != 1 {
					t.Errorf("queue: %d waiting %d active, want the waiter gone", q.Waiting(), q.Active())
				}
			})
			g.ReleaseAll()
			h.waitStatus(first, domain.StatusCompleted)
			h.auditClean()
		})

		t.Run("scheduling", func(t *testing.T) {
			// Its worker is lost and no other can take it: it is back with the
			// executor, holding its slot.
			h := newHarness(t, harnessConfig{single: single, lease: 10 * time.Second})
			g := newGate()
			h.addWorker("w1", 4, time.Hour, map[string]runner.Runner{"test.job": g})
			h.define(domain.Policy{Ref: "c.sched", Runner: "test.job", MaxConcurrent: 1})
			id := h.request("c.sched", "")
			h.waitStatus(id, domain.StatusRunning)
			h.advance(11 * time.Second)
			h.waitStatus(id, domain.StatusScheduling)
			h.cancel(id)
			checkCancelled(t, h, id, domain.OwnerExecutor, "")
			h.settle()
			h.exec.Inspect(func(st *projections.State) {
				if q := st.Queues.Get("c.sched"); q.Active() != 0 {
					t.Errorf("queue: %d active, want the slot released", q.Active())
				}
			})
			g.ReleaseAll() // the lost worker's result is refused
			h.waitFor("w1 to give up", func() bool { return len(h.logs.find("result refused", "execution", id)) > 0 })
			h.auditClean()
		})

		t.Run("scheduled", func(t *testing.T) {
			// Handed to w1, which has not heard of it yet: the request goes to
			// the worker, which cancels instead of starting.
			h := newHarness(t, harnessConfig{single: single, noForwarder: true})
			h.addWorker("w1", 4, time.Hour, nil)
			h.define(domain.Policy{Ref: "c.handed", Runner: "core.noop"})
			id := h.request("c.handed", "")
			h.waitStatus(id, domain.StatusScheduled)
			h.cancel(id)
			h.quiesce()
			if got := h.loaded(id).Status(); got != domain.StatusScheduled {
				t.Fatalf("status %s before the worker heard of it: after the handoff only the worker ends it", got)
			}
			h.startForwarder()
			checkCancelled(t, h, id, domain.OwnerWorker, "w1")
			if got := types(h.stream(domain.ExecutionStream(id))); !slices.Equal(got, []string{"requested", "scheduling", "scheduled", "cancel_requested", "cancelled"}) {
				t.Fatalf("stream %v", got)
			}
			h.auditClean()
		})

		t.Run("running core.sleep", func(t *testing.T) {
			h := newHarness(t, harnessConfig{single: single})
			h.addWorker("w1", 4, time.Hour, nil)
			h.define(domain.Policy{Ref: "c.sleep", Runner: runner.NameSleep})
			id := h.request("c.sleep", `{"seconds":3600}`)
			h.waitStatus(id, domain.StatusRunning)
			h.cancel(id)
			checkCancelled(t, h, id, domain.OwnerWorker, "w1") // the sleep woke up
			h.auditClean()
		})

		t.Run("running core.shell", func(t *testing.T) {
			if runtime.GOOS != "linux" {
				t.Skip("core.shell's process-group signals are tested on linux")
			}
			h := newHarness(t, harnessConfig{single: single})
			h.addWorker("w1", 4, time.Hour, nil) // core.shell kill grace 300ms
			h.define(domain.Policy{Ref: "c.shell", Runner: runner.NameShell, MaxConcurrent: 2,
				RunnerConfig: json.RawMessage(`{"command":"sh","args":["-c"],"input_args":true}`)})
			ready := filepath.Join(t.TempDir(), "ready")
			polite := h.request("c.shell", `{"args":["exec sleep 3600"]}`)
			stubborn := h.request("c.shell", `{"args":["trap '' INT; touch `+ready+`; sleep 3600"]}`)
			h.waitStatus(polite, domain.StatusRunning)
			h.waitFor("the stubborn shell to ignore SIGINT", func() bool { _, err := os.Stat(ready); return err == nil })
			h.cancel(polite)
			h.cancel(stubborn)
			for id, signal := range map[string]string{polite: "SIGINT", stubborn: "SIGKILL"} {
				c := checkCancelled(t, h, id, domain.OwnerWorker, "w1")
				var res struct {
					Signal string `json:"signal"`
				}
				if err := json.Unmarshal(c.Result, &res); err != nil || res.Signal != signal {
					t.Errorf("cancelled with result %s, want the partial result of a process ended by %s", c.Result, signal)
				}
			}
			h.auditClean()
		})

		t.Run("timed out keeps the partial result", func(t *testing.T) {
			if runtime.GOOS != "linux" {
				t.Skip("core.shell's process-group signals are tested on linux")
			}
			h := newHarness(t, harnessConfig{single: single})
			h.addWorker("w1", 4, time.Hour, nil)
			h.define(domain.Policy{Ref: "c.timeout", Runner: runner.NameShell, TimeoutSeconds: 0.2,
				RunnerConfig: json.RawMessage(`{"command":"sleep","args":["3600"]}`)})
			id := h.request("c.timeout", `{}`)
			x := h.waitStatus(id, domain.StatusTimedOut).State()
			var res struct {
				Signal string `json:"signal"`
			}
			if err := json.Unmarshal(x.Result, &res); err != nil || res.Signal != "SIGINT" {
				t.Fatalf("timed out with result %s, want the partial result", x.Result)
			}
			h.auditClean()
		})

		t.Run("ended", func(t *testing.T) {
			h := newHarness(t, harnessConfig{single: single})
			h.addWorker("w1", 4, time.Hour, nil)
			h.define(domain.Policy{Ref: "c.done", Runner: "core.noop"})
			id := h.request("c.done", "")
			h.waitStatus(id, domain.StatusCompleted)
			before := len(h.stream(domain.ExecutionStream(id)))
			err := h.cmds.RequestCancel(context.Background(), id, "too late")
			var re *domain.RuleError
			if !errors.Is(err, command.ErrAlreadyEnded) || !errors.As(err, &re) || re.Rule != domain.RuleTerminal {
				t.Fatalf("RequestCancel of an ended execution = %v, want ErrAlreadyEnded and a RuleError", err)
			}
			if !strings.Contains(err.Error(), "completed") {
				t.Errorf("error %q does not say how it ended", err)
			}
			if after := len(h.stream(domain.ExecutionStream(id))); after != before {
				t.Fatalf("%d events after the refused cancel, %d before", after, before)
			}
			if err := h.cmds.RequestCancel(context.Background(), "no-such-id", ""); !errors.Is(err, command.ErrUnknownExecution) || !errors.Is(err, domain.ErrNotFound) {
				t.Fatalf("RequestCancel of an unknown id = %v, want ErrUnknownExecution", err)
			}
		})
	})
}

// TestQueueTimeout: a waiter that waited longer than queue_timeout (log time
// of its request against the executor's clock) is cancelled with code
// queue_timeout; the running execution is untouched.
func TestQueueTimeout(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		h := newHarness(t, harnessConfig{single: single})
		g := newGate()
		h.addWorker("w1", 4, time.Hour, map[string]runner.Runner{"test.job": g})
		h.define(domain.Policy{Ref: "qt", Runner: "test.job", MaxConcurrent: 1, QueueTimeoutSeconds: 5})
		running := h.request("qt", "")
		h.waitFor("the first to run", func() bool { return g.Waiting() == 1 })
		h.advance(3 * time.Second)
		waiter := h.request("qt", "") // requested 3s later
		h.advance(4 * time.Second)    // the first has been in for 7s, but it is not waiting; the waiter 4s
		if got := h.loaded(waiter).Status(); got != domain.StatusRequested {
			t.Fatalf("waiter %s after 4s of a 5s queue timeout", got)
		}
		h.advance(2 * time.Second)
		h.waitStatus(waiter, domain.StatusCancelled)
		last := h.lastEvent(waiter)
		if c := last.ev.(domain.ExecutionCancelled); c.Code != domain.CancelQueueTimeout || !strings.HasPrefix(c.Reason, "queue_timeout") || last.env.Owner != domain.OwnerExecutor {
			t.Fatalf("cancelled %+v by %s", c, last.env.Owner)
		}
		if got := h.loaded(running).Status(); got != domain.StatusRunning {
			t.Fatalf("the running execution is %s", got)
		}
		g.ReleaseAll()
		h.waitStatus(running, domain.StatusCompleted)
		h.auditClean()
	})
}

// TestDrainWithWorkInFlight: w1 drains with two runs in flight. It records
// worker.draining, the executor hands it nothing new (a request made after
// the executor has folded the draining goes to w2), one run finishes within
// the grace period, the other is stopped when the grace is cut short and
// handed back (nothing written for it by w1), worker.stopped closes the
// incarnation, and the executor takes the run back (execution.abandoned,
// after worker.stopped) and hands it again, to w2, as attempt 2.
// (TestServeStopHandsBack runs a handed-back execution again after a
// restart.)
func TestDrainWithWorkInFlight(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		h := newHarness(t, harnessConfig{single: single})
		ga, gb := newGate(), newGate()
		w1 := h.addWorker("w1", 4, time.Hour, map[string]runner.Runner{"test.a": ga, "test.b": gb})
		h.define(domain.Policy{Ref: "drain.a", Runner: "test.a", MaxConcurrent: 4})
		h.define(domain.Policy{Ref: "drain.b", Runner: "test.b", MaxConcurrent: 4})
		a := h.request("drain.a", "")
		b := h.request("drain.b", "")
		h.waitFor("both running on w1", func() bool { return ga.Waiting() == 1 && gb.Waiting() == 1 })

		ctx, cut := context.WithCancel(context.Background())
		defer cut()
		done := make(chan error, 1)
		go func() { done <- w1.Drain(ctx, time.Hour) }()
		h.waitEvent(domain.WorkerStream("w1"), domain.TypeWorkerDraining)
		h.settle()

		quick := runner.Func(func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{}`), nil })
		h.addWorker("w2", 4, time.Hour, map[string]runner.Runner{"test.a": quick, "test.b": quick})
		c := h.request("drain.a", "")
		h.waitStatus(c, domain.StatusCompleted)
		if s := h.stream(domain.ExecutionStream(c))[2].ev.(domain.ExecutionScheduled); s.Worker != "w2" {
			t.Fatalf("a request after the draining was handed to %s", s.Worker)
		}

		ga.ReleaseAll() // a finishes within the grace period
		h.waitStatus(a, domain.StatusCompleted)
		cut() // the grace period ends now: b is still running
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(waitLimit):
			t.Fatal("Drain did not return")
		}

		// (w2 does not run it here: w1's drain closed the bus the harness's
		// workers share; the handoff in the log is what this test checks.)
		h.waitFor("b handed again", func() bool {
			got := types(h.stream(domain.ExecutionStream(b)))
			return slices.Equal(got, []string{"requested", "scheduling", "scheduled", "running", "abandoned", "scheduled"})
		})
		ws := h.stream(domain.WorkerStream("w1"))
		var abandonedAt uint64
		var handedTo []string
		for _, e := range h.stream(domain.ExecutionStream(b)) {
			switch ev := e.ev.(type) {
			case domain.ExecutionAbandoned:
				abandonedAt = e.env.Position
			case domain.ExecutionScheduled:
				handedTo = append(handedTo, fmt.Sprintf("%s#%d", ev.Worker, ev.Attempt))
			case domain.ExecutionFailed:
				t.Fatalf("b failed: %+v", ev)
			}
		}
		if !slices.Equal(handedTo, []string{"w1#1", "w2#2"}) {
			t.Fatalf("b handed to %v, want w1#1 then w2#2", handedTo)
		}
		if abandonedAt == 0 || abandonedAt < ws[len(ws)-1].env.Position {
			t.Fatalf("b abandoned at %d, worker.stopped at %d", abandonedAt, ws[len(ws)-1].env.Position)
		}
		want := []string{"worker.registered", "worker.draining", "worker.stopped"}
		got := types(ws)
		if single { // each run's first write followed a heartbeat (services/worker/serialfence.go); two runs fenced at once share one
			want = []string{"worker.registered", "worker.heartbeat", "worker.heartbeat", "worker.draining", "worker.stopped"}
			if len(got) == 4 {
				want = slices.Delete(want, 2, 3)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("worker-w1 %v, want %v", got, want)
		}
		drainAt := ws[len(ws)-2].env.Position
		if ae := h.lastEvent(a); ae.env.Position < drainAt || ae.env.Writer != "w1" {
			t.Fatalf("a completed at %d by %s, the draining is at %d", ae.env.Position, ae.env.Writer, drainAt)
		}
		for _, r := range h.logs.errorsLogged() {
			t.Errorf("a drain logged at error level: %s %v", r.msg, r.attrs)
		}
		h.auditClean()
	})
}
