package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/repository"
	"github.com/turnstile/turnstile/services/runner"
)

// TestHandoffExpiresBeforeTheWorkerStarts: the worker hears of its handoff
// only after the executor took it back (the forwarder starts late). The
// worker's start loses on the stream's version, re-reads, finds the handoff
// is no longer its attempt, gives up and logs a *domain.RuleError; attempt 2
// runs.
func TestHandoffExpiresBeforeTheWorkerStarts(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		h := newHarness(t, harnessConfig{single: single, noForwarder: true})
		h.addWorker("w1", 4, time.Hour, nil)
		h.define(domain.Policy{Ref: "exp.first", Runner: "core.noop", ScheduledTimeoutSeconds: 5, MaxAttempts: 3})
		id := h.request("exp.first", "")
		h.waitStatus(id, domain.StatusScheduled)

		h.clock.Advance(6 * time.Second)
		h.waitFor("attempt 2", func() bool { x := h.loaded(id); return x.Attempt() == 2 && x.Status() == domain.StatusScheduled })
		h.startForwarder() // w1 now hears of both handoffs, the expired one first
		h.waitStatus(id, domain.StatusCompleted)

		evs := h.stream(domain.ExecutionStream(id))
		want := []string{"requested", "scheduling", "scheduled", "handoff_expired", "scheduled", "running", "completed"}
		if got := types(evs); !slices.Equal(got, want) {
			t.Fatalf("execution stream %v, want %v", got, want)
		}
		if e := evs[3].ev.(domain.ExecutionHandoffExpired); e.Worker != "w1" || e.Attempt != 1 {
			t.Fatalf("expiry %+v", e)
		}
		if e := evs[5].ev.(domain.ExecutionRunning); e.Attempt != 2 || evs[5].env.Writer != "w1" {
			t.Fatalf("running %+v by %s, want attempt 2", e, evs[5].env.Writer)
		}
		h.waitFor("w1 to log giving up attempt 1", func() bool {
			return len(h.logs.find("gave up an execution before starting it", "execution", id, "attempt", 1)) > 0
		})
		rec := h.logs.find("gave up an execution before starting it", "execution", id, "attempt", 1)[0]
		if !isRuleError(rec.attrs["err"]) {
			t.Fatalf("w1 gave up with %v, want a *domain.RuleError", rec.attrs["err"])
		}
		if h.exec.Stats.Expiries.Load() != 1 {
			t.Fatalf("%d expiries, want 1", h.exec.Stats.Expiries.Load())
		}
		h.auditClean()
	})
}

// TestWorkerStartsBeforeTheHandoffExpires: the executor decides the expiry,
// but the worker's execution.running is appended first. The expiry fails on
// the stream's version, the executor logs that the log decided otherwise,
// and the execution runs to its end on attempt 1.
func TestWorkerStartsBeforeTheHandoffExpires(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		held := make(chan string, 1)
		release := make(chan struct{})
		h := newHarness(t, harnessConfig{single: single, noForwarder: true, beforeAppend: func(what string) {
			if strings.HasPrefix(what, "expire ") {
				select {
				case held <- what:
				default:
				}
				<-release
			}
		}})
		defer func() {
			select {
			case <-release:
			default:
				close(release)
			}
		}()
		h.addWorker("w1", 4, time.Hour, nil)
		h.define(domain.Policy{Ref: "start.first", Runner: "core.noop", ScheduledTimeoutSeconds: 5, MaxAttempts: 3})
		id := h.request("start.first", "")
		h.waitStatus(id, domain.StatusScheduled)

		h.clock.Advance(6 * time.Second)
		select {
		case what := <-held: // the executor has decided the expiry and holds it
			if what != "expire "+id {
				t.Fatalf("held %q", what)
			}
		case <-time.After(waitLimit):
			t.Fatal("the executor never decided the expiry")
		}
		h.startForwarder()
		h.waitStatus(id, domain.StatusCompleted) // the worker started (and finished) first
		close(release)
		h.waitFor("the executor to log its lost race", func() bool {
			return len(h.logs.find("lost a race for a take-back", "op", "expire "+id)) > 0
		})
		h.settle()

		evs := h.stream(domain.ExecutionStream(id))
		if got, want := types(evs), []string{"requested", "scheduling", "scheduled", "running", "completed"}; !slices.Equal(got, want) {
			t.Fatalf("execution stream %v, want %v", got, want)
		}
		if e := evs[3].ev.(domain.ExecutionRunning); e.Attempt != 1 {
			t.Fatalf("running attempt %d", e.Attempt)
		}
		if h.exec.Stats.Expiries.Load() != 0 || h.exec.Stats.Conflicts.Load() < 1 {
			t.Fatalf("expiries %d conflicts %d, want 0 and at least 1", h.exec.Stats.Expiries.Load(), h.exec.Stats.Conflicts.Load())
		}
		h.auditClean()
	})
}

// TestHandoffExpiryExhaustsAttempts: no worker ever starts it; after
// max_attempts handoffs it fails with code scheduled_timeout, and its slot
// goes to the next waiter.
//
// A handoff taken back goes to another worker than the one that did not
// start it, when one is free.
func TestHandoffExpiryExhaustsAttempts(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		h := newHarness(t, harnessConfig{single: single, noForwarder: true})
		h.addWorker("w1", 4, time.Hour, nil)
		h.define(domain.Policy{Ref: "exp.never", Runner: "core.noop", ScheduledTimeoutSeconds: 5, MaxAttempts: 2})
		id := h.request("exp.never", "")
		next := h.request("exp.never", "")
		first := h.waitStatus(id, domain.StatusScheduled).Worker()
		h.addWorker("w2", 4, time.Hour, nil)
		h.advance(6 * time.Second)
		h.waitFor("attempt 2", func() bool { return h.loaded(id).Attempt() == 2 })
		if second := h.loaded(id).Worker(); second == first {
			t.Fatalf("attempt 2 handed to %s again, with another worker free", second)
		}
		h.advance(6 * time.Second)
		x := h.waitStatus(id, domain.StatusFailed)
		st := x.State()
		if st.Code != domain.FailScheduledTimeout || !strings.Contains(st.Error, "scheduled_timeout") || st.Attempt != 2 {
			t.Fatalf("failed with code %q error %q after %d attempts", st.Code, st.Error, st.Attempt)
		}
		h.waitStatus(next, domain.StatusScheduled) // the slot was released
		evs := h.stream(domain.ExecutionStream(id))
		want := []string{"requested", "scheduling", "scheduled", "handoff_expired", "scheduled", "handoff_expired", "failed"}
		if got := types(evs); !slices.Equal(got, want) {
			t.Fatalf("execution stream %v, want %v", got, want)
		}
		if evs[len(evs)-1].env.Owner != domain.OwnerExecutor {
			t.Fatalf("failed written by %s", evs[len(evs)-1].env.Owner)
		}
		h.auditClean()
	})
}

// TestLostWorkerComesBackAndIsRefused: w1 writes no sign of life while it runs
// two executions; when its lease lapses by log time, the executor declares it
// lost and abandons both in the same append. One is handed to w2 and
// completes there; the other (max_attempts 1) fails with code worker_lost.
// When w1's runs finish, their results are refused by the handoff rule (a
// *domain.RuleError in w1's log), w1 learns it was replaced and registers as
// a new incarnation, and it never writes for the old handoffs.
func TestLostWorkerComesBackAndIsRefused(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		for _, kind := range []string{"memstore", "embedded"} {
			t.Run(kind, func(t *testing.T) {
				h := newHarness(t, harnessConfig{single: single, lease: 10 * time.Second, embedded: kind == "embedded"})
				g := newGate()
				w1 := h.addWorker("w1", 4, time.Hour, map[string]runner.Runner{"test.job": g}) // registers, then is silent
				inc1 := w1.Incarnation()
				h.define(domain.Policy{Ref: "lost.retry", Runner: "test.job", MaxAttempts: 3})
				h.define(domain.Policy{Ref: "lost.once", Runner: "test.job", MaxAttempts: 1})
				retry := h.request("lost.retry", "")
				once := h.request("lost.once", "")
				h.waitFor("both running on w1", func() bool { return g.Waiting() == 2 })

				quick := runner.Func(func(context.Context, json.RawMessage) (json.RawMessage, error) {
					return json.RawMessage(`{"by":"w2"}`), nil
				})
				h.addWorker("w2", 4, 5*time.Millisecond, map[string]runner.Runner{"test.job": quick})
				// Log time moves one second at a time; w2 owes nothing, or pays
				// what it owes, at each step; w1 holds two runs and writes
				// nothing: only w1's lease lapses.
				for range 11 {
					h.clock.Advance(time.Second)
					h.waitPaid("w2")
				}
				h.waitStatus(retry, domain.StatusCompleted)
				failed := h.waitStatus(once, domain.StatusFailed).State()
				if failed.Code != domain.FailWorkerLost || !strings.Contains(failed.Error, "worker_lost") {
					t.Fatalf("once failed with code %q error %q", failed.Code, failed.Error)
				}

				g.ReleaseAll() // w1 comes back: its runs finish and try to write
				h.waitFor("w1 to register a new incarnation", func() bool {
					evs := h.stream(domain.WorkerStream("w1"))
					r, ok := evs[len(evs)-1].ev.(domain.WorkerRegistered)
					return ok && r.Incarnation != inc1 && r.Incarnation == w1.Incarnation()
				})
				// The first refusal comes from the handoff rule and teaches w1 it
				// was replaced. A run that ends after that is refused by w1 itself
				// (its incarnation is no longer current) before any append, or is
				// stopped without writing if it was still running.
				gaveUp := func(id string) []logRecord {
					return append(h.logs.find("result refused", "execution", id), h.logs.find("run stopped: its incarnation", "execution", id)...)
				}
				h.waitFor("w1 to give up both", func() bool { return len(gaveUp(retry)) > 0 && len(gaveUp(once)) > 0 })
				rules := 0
				for _, id := range []string{retry, once} {
					r := gaveUp(id)[0]
					err, _ := r.attrs["err"].(error)
					switch {
					case isRuleError(err):
						rules++
					case err != nil && !errors.Is(err, domain.ErrWorkerReplaced):
						t.Fatalf("refusal of %s logged %v, want a *domain.RuleError or ErrWorkerReplaced", id, err)
					}
				}
				if rules == 0 {
					t.Fatal("no refusal by the handoff rule")
				}
				h.settle()

				// The worker stream: registered, lost (that incarnation), a new one.
				var ws []string
				for _, r := range h.stream(domain.WorkerStream("w1")) {
					switch e := r.ev.(type) {
					case domain.WorkerRegistered:
						ws = append(ws, "registered "+e.Incarnation)
					case domain.WorkerLost:
						ws = append(ws, "lost "+e.Incarnation)
					}
				}
				inc2 := w1.Incarnation()
				if want := []string{"registered " + inc1, "lost " + inc1, "registered " + inc2}; !slices.Equal(ws, want) {
					t.Fatalf("worker-w1 %v, want %v", ws, want)
				}
				// The verdict and both abandonments are one commit (single-stream:
				// the abandonments come first); nothing by w1 follows them in
				// either stream.
				var lostAt uint64
				for _, r := range h.all() {
					if _, ok := r.ev.(domain.WorkerLost); ok {
						lostAt = r.env.Position
					}
				}
				for _, id := range []string{retry, once} {
					evs := h.stream(domain.ExecutionStream(id))
					ab := slices.IndexFunc(evs, func(r rec) bool { return r.env.Type == domain.TypeExecutionAbandoned })
					switch {
					case ab < 0:
						t.Fatalf("%s: not abandoned", id)
					case single && evs[ab].env.Position >= lostAt:
						// One stream at a time: every abandonment lands before the verdict.
						t.Fatalf("%s: abandoned at %d, the verdict at %d: the verdict came first", id, evs[ab].env.Position, lostAt)
					case !single && (evs[ab].env.Position > lostAt+2 || evs[ab].env.Position <= lostAt):
						t.Fatalf("%s: abandoned at %d, the verdict at %d: not one commit", id, evs[ab].env.Position, lostAt)
					}
					for _, r := range evs[ab:] {
						if r.env.Owner == domain.OwnerWorker && r.env.Writer == "w1" {
							t.Fatalf("%s: w1 wrote %s after it was taken back", id, r.env.Type)
						}
					}
				}
				want := []string{"requested", "scheduling", "scheduled", "running", "abandoned", "scheduled", "running", "completed"}
				evs := h.stream(domain.ExecutionStream(retry))
				if got := types(evs); !slices.Equal(got, want) {
					t.Fatalf("retried execution %v, want %v", got, want)
				}
				if s := evs[5].ev.(domain.ExecutionScheduled); s.Worker != "w2" || s.Attempt != 2 || evs[7].env.Writer != "w2" {
					t.Fatalf("attempt 2 %+v completed by %s", s, evs[7].env.Writer)
				}
				if rep := h.auditClean(); rep.ByStatus["completed"] != 1 || rep.ByStatus["failed"] != 1 {
					t.Fatalf("by status %v", rep.ByStatus)
				}
			})
		}
	})
}

// TestLoseWorkersAtStartSparesNewWorkers: a restarted executor declares the
// previous run's workers lost before it says it is ready, so a worker that
// registers after Ready is never taken for one of them.
func TestLoseWorkersAtStartSparesNewWorkers(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		h := newHarness(t, harnessConfig{single: single, noExecutor: true, loseAtStart: true})
		old := domain.WorkerRegistered{Slots: 1, Incarnation: "old-run"}
		if _, err := repository.UpdateWorker(context.Background(), h.store, "w-old", domain.OwnerWorker, "w-old", nil,
			func(*domain.Worker) (domain.Event, error) { return old, nil }); err != nil {
			t.Fatal(err)
		}
		h.startExecutor()
		h.addWorker("w-new", 1, time.Hour, nil)
		h.settle()
		h.cycles(3)
		if got := types(h.stream(domain.WorkerStream("w-old"))); !slices.Equal(got, []string{"worker.registered", "worker.lost"}) {
			t.Fatalf("worker-w-old %v", got)
		}
		if got := types(h.stream(domain.WorkerStream("w-new"))); !slices.Equal(got, []string{"worker.registered"}) {
			t.Fatalf("worker-w-new %v: a worker of this run was declared lost", got)
		}
	})
}
