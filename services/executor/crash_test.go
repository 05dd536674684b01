package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// errCut is what a cutStore answers once its writer is "dead".
var errCut = errors.New("test: the writer's process ended here")

// cutStore lets its first n appends (Append or AppendMulti) through and fails
// every later one with errCut, as if its writer died right after its n-th
// append. n < 0 never cuts. Reads and subscriptions are the store's.
type cutStore struct {
	eventstore.Store
	mu     sync.Mutex
	left   int
	landed int
	cut    chan struct{} // closed at the first refused append
}

func newCutStore(s eventstore.Store, n int) *cutStore {
	return &cutStore{Store: s, left: n, cut: make(chan struct{})}
}

func (c *cutStore) take() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.left == 0 {
		select {
		case <-c.cut:
		default:
			close(c.cut)
		}
		return false
	}
	c.left--
	return true
}

func (c *cutStore) done(err error) {
	if err == nil {
		c.mu.Lock()
		c.landed++
		c.mu.Unlock()
	}
}

// Landed returns how many appends went through and succeeded.
func (c *cutStore) Landed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.landed
}

func (c *cutStore) isCut() bool {
	select {
	case <-c.cut:
		return true
	default:
		return false
	}
}

func (c *cutStore) AtomicMultiStream() bool { return eventstore.AtomicMultiStream(c.Store) }

func (c *cutStore) Append(ctx context.Context, stream string, expected eventstore.ExpectedVersion, events ...domain.Envelope) (eventstore.AppendResult, error) {
	if !c.take() {
		return eventstore.AppendResult{}, errCut
	}
	res, err := c.Store.Append(ctx, stream, expected, events...)
	c.done(err)
	return res, err
}

func (c *cutStore) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	if !c.take() {
		return eventstore.AppendResult{}, errCut
	}
	res, err := c.Store.AppendMulti(ctx, appends...)
	c.done(err)
	return res, err
}

// partials counts the partial writes of the single-stream path a log shows.
type partials struct {
	grants   int // queue.granted with no execution.scheduling after it (the execution not ended)
	children int // children announced by a parent and not requested
	verdicts int // abandonments "declared lost" with no worker.lost after them
}

func (p partials) String() string {
	return fmt.Sprintf("%d grants without handoff, %d announced children missing, %d abandonments without verdict", p.grants, p.children, p.verdicts)
}

func findPartials(recs []rec) partials {
	var p partials
	scheduled, ended := map[string]bool{}, map[string]bool{}
	exists := map[string]bool{}
	asked := map[string]int{}
	lostWorkers := map[string]bool{}
	var abandonedBy []string
	for _, r := range recs {
		_, id := domain.SplitStream(r.env.Stream)
		switch e := r.ev.(type) {
		case domain.ExecutionRequested:
			exists[id] = true
		case domain.ExecutionScheduling:
			scheduled[id] = true
		case domain.ExecutionChildrenRequested:
			asked[id] = e.First + e.Count
		case domain.ExecutionAbandoned:
			if strings.Contains(e.Reason, "was declared lost") {
				abandonedBy = append(abandonedBy, e.Worker)
			}
		case domain.WorkerLost:
			lostWorkers[id] = true
		case domain.ExecutionCompleted, domain.ExecutionFailed, domain.ExecutionCancelled, domain.ExecutionRejected, domain.ExecutionTimedOut:
			ended[id] = true
		}
	}
	for _, r := range recs {
		if g, ok := r.ev.(domain.QueueGranted); ok && !scheduled[g.Execution] && !ended[g.Execution] {
			p.grants++
		}
	}
	for parent, n := range asked {
		for i := range n {
			if !exists[domain.ChildID(parent, i)] {
				p.children++
			}
		}
	}
	for _, w := range abandonedBy {
		if !lostWorkers[w] {
			p.verdicts++
		}
	}
	return p
}

// crashRun is one run of the crash scenario with the executor's appends cut
// after cut of them (-1: never). It returns how many of the executor's
// appends landed before the restart and the partial writes the log showed
// then.
func crashRun(t *testing.T, cut int) (landed int, seen partials, repairs int64) {
	t.Helper()
	var cs *cutStore
	h := newHarness(t, harnessConfig{single: true, noExecutor: true, lease: 2 * time.Second,
		execStore: func(s eventstore.Store) eventstore.Store { cs = newCutStore(s, cut); return cs }})
	hold := newGate()
	var quick atomic.Bool // once set, test.hold runs end at once
	holdRunner := runner.Func(func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
		if quick.Load() {
			return json.RawMessage(`{}`), nil
		}
		return hold.Run(ctx, in)
	})
	letGo := func() { quick.Store(true); hold.ReleaseAll() }
	h.addWorker("wA", 4, 5*time.Millisecond, nil)
	h.addWorker("wH", 8, time.Hour, map[string]runner.Runner{"test.hold": holdRunner}) // registers, then is silent
	h.define(domain.Policy{Ref: "crash.two", Runner: "core.noop", MaxConcurrent: 2})
	h.define(domain.Policy{Ref: "crash.hold", Runner: "test.hold", MaxConcurrent: 2, MaxAttempts: 3})
	h.define(domain.Policy{Ref: "crash.wait", Runner: "test.hold", MaxConcurrent: 1, MaxAttempts: 3, QueueTimeoutSeconds: 1})
	var ids []string
	for range 4 {
		ids = append(ids, h.request("crash.two", ""))
	}
	for range 2 {
		ids = append(ids, h.request("crash.hold", ""))
	}
	for range 2 {
		ids = append(ids, h.request("crash.wait", ""))
	}
	ids = append(ids, h.request("crash.unknown", ""))
	parent, _, err := h.cmds.Request(context.Background(), command.Request{Action: "crash.two",
		WithItems: []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`2`), json.RawMessage(`3`)}, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, parent)

	h.startExecutor()
	// Until the cut (or the end): the quick work ends, the held work runs on
	// wH, then log time passes wH's lease and the waiter's queue timeout; once
	// wH is declared lost, its runs end, it learns it was replaced, and it
	// runs what was taken back from it as a new incarnation.
	untilCut := func(what string, cond func() bool) {
		t.Helper()
		h.waitFor(what+" (or the cut)", func() bool { return cs.isCut() || cond() })
	}
	ended := func(id string) bool {
		x, err := h.cmds.LoadExecution(context.Background(), id)
		return err == nil && x.Status().Terminal()
	}
	untilCut("quick work done, held work running", func() bool { return ended(parent) && hold.Waiting() == 3 })
	advance := func() {
		for range 3 { // wA owes nothing or pays at each step, wH holds runs and writes nothing: only wH's lease lapses
			h.clock.Advance(time.Second)
			h.waitPaid("wA")
		}
	}
	allEnded := func() bool {
		for _, id := range ids {
			if !ended(id) {
				return false
			}
		}
		return true
	}
	if !cs.isCut() {
		advance()
		untilCut("wH declared lost", func() bool {
			return slices.ContainsFunc(h.stream(domain.WorkerStream("wH")), func(r rec) bool { return r.env.Type == domain.TypeWorkerLost })
		})
		letGo()
		untilCut("every execution ended", allEnded)
	}
	landed = cs.Landed()
	h.exec.Stop()
	seen = findPartials(h.all())

	// A new executor of the same name on the same log, nothing cut: it must
	// complete whatever the first one left half-written.
	h.cfg.execStore = nil
	h.startExecutor()
	advance()
	letGo()
	// wH may be lost and never learn it (it had nothing to write): wB runs
	// what wH would have.
	h.addWorker("wB", 4, 5*time.Millisecond, map[string]runner.Runner{"test.hold": holdRunner})
	deadline := time.Now().Add(10 * time.Second)
	for !allEnded() {
		if time.Now().After(deadline) {
			h.exec.Inspect(func(st *projections.State) {
				for _, id := range st.LiveIDs() {
					x := st.Execution(id)
					t.Logf("live %s: %s attempt %d worker %s parent %v asked %d cancel %v", id, x.Status(), x.Attempt(), x.Worker(), x.IsParent(), x.ChildrenRequested(), x.CancelRequested())
				}
				t.Logf("unscheduled %v announced %v attention %v", st.Unscheduled, st.Announced, st.Attention)
				for id, f := range st.Fanouts {
					t.Logf("fanout %s: %+v", id, *f)
				}
				for id, w := range st.Workers {
					t.Logf("worker %s: %s free %d inflight %v", id, w.Status(), w.Free(), w.InFlight)
				}
			})
			for _, r := range h.all() {
				t.Logf("%d %s %s %s %s", r.env.Position, r.env.Stream, r.env.Type, r.env.Writer, r.env.Data)
			}
			t.Fatal("gave up waiting for every execution to end")
		}
		time.Sleep(2 * time.Millisecond)
	}
	h.settle()
	repairs = h.exec.Stats.Repairs.Load()
	checkCrashLog(t, h, len(ids))
	return landed, seen, repairs
}

// checkCrashLog checks a crash run's log: the audit is clean (the handoff
// rule, FIFO and the limits at every position, one end per execution), every
// execution ended, and nothing was written twice: one request, at most one
// grant and one slot per execution, each announced child requested once.
func checkCrashLog(t *testing.T, h *harness, executions int) {
	t.Helper()
	rep := h.auditClean()
	if len(rep.Open) != 0 || rep.Ended != executions+3 { // + the parent's 3 children
		t.Errorf("%d executions ended, %d open (%v); want %d ended", rep.Ended, len(rep.Open), rep.Open, executions+3)
	}
	ids := map[uuid.UUID]bool{}
	requested, granted, slots := map[string]int{}, map[string]int{}, map[string]int{}
	for _, r := range h.all() {
		if ids[r.env.ID] {
			t.Errorf("event id %s twice in the log", r.env.ID)
		}
		ids[r.env.ID] = true
		_, id := domain.SplitStream(r.env.Stream)
		switch e := r.ev.(type) {
		case domain.ExecutionRequested:
			requested[id]++
		case domain.QueueGranted:
			granted[e.Execution]++
		case domain.ExecutionScheduling:
			slots[id]++
		}
	}
	for id, n := range requested {
		if n != 1 || granted[id] > 1 || slots[id] > 1 {
			t.Errorf("execution %s: requested %d times, granted %d, took a slot %d times", id, n, granted[id], slots[id])
		}
	}
}

// TestSingleStreamCrashAtEveryAppend cuts the executor's single-stream
// appends after the 1st, 2nd, … of them (a crash between the fence and what
// follows it, at every step of a run with grants of several executions,
// a with_items fan-out, a rejection, a queue timeout, a lost worker with
// held executions and their reschedules), restarts an executor of the same
// name on the log, and checks that it completes every half-written op: every
// execution ends exactly once, the audit (FIFO, limits, handoff rule) is
// clean, nothing is written twice. Across the cuts, each kind of partial
// write must have happened at least once, and been repaired.
func TestSingleStreamCrashAtEveryAppend(t *testing.T) {
	var all partials
	var repairs int64
	// Which decisions share an append depends on timing (a loaded machine
	// batches differently), so a sweep may meet no cut of some kind: the
	// sweep is run again, up to three times, until every kind has been met.
	for sweep := 1; sweep <= 3; sweep++ {
		total, _, _ := crashRun(t, -1)
		if total < 10 {
			t.Fatalf("the uncut run made only %d appends", total)
		}
		step := 1
		if testing.Short() {
			step = 4
		}
		runs, ran := 0, 0
		for n := 0; n <= total+2; n += step {
			runs++
			t.Run(fmt.Sprintf("sweep %d cut after %d", sweep, n), func(t *testing.T) {
				ran++
				_, seen, r := crashRun(t, n)
				all.grants += seen.grants
				all.children += seen.children
				all.verdicts += seen.verdicts
				repairs += r
			})
		}
		t.Logf("sweep %d, uncut run: %d appends by the executor; cuts so far left %s; the restarted executors made %d repairs", sweep, total, all, repairs)
		if ran < runs {
			return // some cuts were left out (-run): the totals say nothing
		}
		if testing.Short() || (all.grants > 0 && all.children > 0 && all.verdicts > 0) {
			break
		}
	}
	if !testing.Short() && (all.grants == 0 || all.children == 0 || all.verdicts == 0) {
		t.Errorf("some kind of partial write never happened in three sweeps: %s", all)
	}
	if all.grants+all.children > 0 && repairs == 0 {
		t.Error("partial writes were left, and no restarted executor repaired any")
	}
}

// TestAnnouncedChangeHoldsGrants: on a single-stream log an action change is
// announced on the queue stream before its action event; while the action
// stream does not show it, the executor grants nothing from that queue, even
// with a free slot (here the announcement cannot be completed: it carries no
// usable event, which the executor logs). The next change at that version
// satisfies it, and grants resume.
func TestAnnouncedChangeHoldsGrants(t *testing.T) {
	h := newHarness(t, harnessConfig{single: true})
	g := newGate()
	h.addWorker("w1", 4, time.Hour, map[string]runner.Runner{"test.job": g})
	p := domain.Policy{Ref: "ann", Runner: "test.job", MaxConcurrent: 1}
	h.define(p)
	a, b := h.request("ann", ""), h.request("ann", "")
	h.waitStatus(a, domain.StatusRunning)

	ann := domain.QueueActionChanged{ActionVersion: 1, Change: domain.TypeActionPaused, Event: json.RawMessage(`{}`)}
	env, err := codec.Events.Encode(uuid.New(), ann, domain.OwnerAPI, "broken-api")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Append(context.Background(), domain.QueueStream("ann"), eventstore.Any, env); err != nil {
		t.Fatal(err)
	}
	// running is written before the run reaches the gate: release it once it waits there.
	h.waitFor("a's run to wait at the gate", func() bool { return g.Waiting() == 1 })
	g.ReleaseAll()
	h.waitStatus(a, domain.StatusCompleted)
	h.settle()
	h.cycles(5)
	if st := h.loaded(b).Status(); st != domain.StatusRequested {
		t.Fatalf("%s is %s while a change was announced and not written", b, st)
	}
	h.waitFor("the executor to report the unusable announcement", func() bool {
		return len(h.logs.find("cannot complete an announced action change", "action", "ann")) > 0
	})

	p.MaxConcurrent = 2
	if changed, err := h.cmds.ChangePolicy(context.Background(), p); err != nil || !changed {
		t.Fatalf("ChangePolicy: %v %v", changed, err)
	}
	h.waitStatus(b, domain.StatusRunning)
	h.waitFor("b's run to wait at the gate", func() bool { return g.Waiting() == 1 })
	g.ReleaseAll()
	h.waitStatus(b, domain.StatusCompleted)
	h.auditClean()
}

// TestExecutorCompletesAnAnnouncedChange: the API process stops between its
// announcement and the action event (its second append is cut); the
// executor appends the announced event itself, with the id and writer the
// API prepared, so the change holds (the queue stays paused) and a late
// append of the API's own is an idempotent replay. A retry finds nothing to do.
func TestExecutorCompletesAnAnnouncedChange(t *testing.T) {
	h := newHarness(t, harnessConfig{single: true})
	h.addWorker("w1", 4, time.Hour, nil)
	h.define(domain.Policy{Ref: "ann", Runner: "core.noop"})
	ctx := context.Background()
	dying := &command.Service{Store: newCutStore(h.store, 1), Writer: "api-2"}
	if _, err := dying.Pause(ctx, "ann", "maintenance"); !errors.Is(err, errCut) {
		t.Fatalf("Pause on a store cut after the announcement: %v", err)
	}
	qs := h.stream(domain.QueueStream("ann"))
	last, ok := qs[len(qs)-1].ev.(domain.QueueActionChanged)
	if !ok || len(last.Event) == 0 {
		t.Fatalf("the queue stream ends with %s, not an announcement", qs[len(qs)-1].env.Type)
	}
	var announced domain.Envelope
	if err := json.Unmarshal(last.Event, &announced); err != nil {
		t.Fatal(err)
	}

	evs := h.waitEvent(domain.ActionStream("ann"), domain.TypeActionPaused)
	got := evs[len(evs)-1].env
	if got.ID != announced.ID || got.Writer != "api-2" || got.Owner != domain.OwnerAPI || got.Version != last.ActionVersion {
		t.Fatalf("action.paused %s by %s %s at version %d; announced %s by api-2 at version %d",
			got.ID, got.Owner, got.Writer, got.Version, announced.ID, last.ActionVersion)
	}
	// The repair is counted once its append has returned, which may be just
	// after the event shows in the log (appends run in the background).
	h.waitFor("the executor to count the repair", func() bool { return h.exec.Stats.Repairs.Load() >= 1 })
	// The API's own append, arriving late, is recognised as the same event.
	if _, err := h.store.Append(ctx, domain.ActionStream("ann"), eventstore.Exact(last.ActionVersion-1), announced); err != nil {
		t.Fatalf("late append of the announced event: %v", err)
	}
	healthy := &command.Service{Store: h.store, Writer: "api-2"}
	if changed, err := healthy.Pause(ctx, "ann", "maintenance"); err != nil || changed {
		t.Fatalf("retried Pause: changed %v, %v; want nothing to do", changed, err)
	}
	x := h.request("ann", "")
	h.quiesce()
	if st := h.loaded(x).Status(); st != domain.StatusRequested {
		t.Fatalf("%s is %s while the action is paused", x, st)
	}
	if _, err := healthy.Resume(ctx, "ann"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(x, domain.StatusCompleted)
	h.auditClean()
}
