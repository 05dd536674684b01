package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/runner"
)

// requestItems requests a with_items parent.
func (h *harness) requestItems(action, input string, items []json.RawMessage, window int) string {
	h.t.Helper()
	id, created, err := h.cmds.Request(context.Background(), command.Request{
		Action: action, Input: json.RawMessage(input), WithItems: items, Concurrency: window})
	if err != nil || !created {
		h.t.Fatalf("request with_items: %v (created %v)", err, created)
	}
	return id
}

// fanoutFold folds the log and returns, for parent, the most children in
// flight (requested and not ended) at any position, checking on the way
// that children are requested in item order with their derived ids and that
// the parent's terminal event comes after every child's.
func fanoutFold(t *testing.T, recs []rec, parent string) (maxInFlight int, children []string) {
	t.Helper()
	live := map[string]bool{}
	ended := false
	for _, r := range recs {
		_, id := domain.SplitStream(r.env.Stream)
		switch e := r.ev.(type) {
		case domain.ExecutionRequested:
			if e.Parent != parent {
				continue
			}
			if ended {
				t.Fatalf("position %d: child requested after the parent ended", r.env.Position)
			}
			if e.ItemIndex != len(children) || id != domain.ChildID(parent, e.ItemIndex) {
				t.Fatalf("position %d: child %s is item %d, want item %d", r.env.Position, id, e.ItemIndex, len(children))
			}
			children = append(children, id)
			live[id] = true
			maxInFlight = max(maxInFlight, len(live))
		case domain.ExecutionCompleted, domain.ExecutionFailed, domain.ExecutionCancelled, domain.ExecutionRejected, domain.ExecutionTimedOut:
			if id == parent {
				if len(live) > 0 {
					t.Fatalf("position %d: the parent ended with %d children in flight", r.env.Position, len(live))
				}
				ended = true
			}
			delete(live, id)
		}
	}
	return maxInFlight, children
}

// maxActive folds the log and returns the most executions of action
// holding a slot (granted, not ended) at any position, per concurrency key.
func maxActive(recs []rec, action string) map[string]int {
	keyOf := map[string]string{}
	active := map[string]int{}
	out := map[string]int{}
	for _, r := range recs {
		_, id := domain.SplitStream(r.env.Stream)
		switch e := r.ev.(type) {
		case domain.QueueGranted:
			if r.env.Stream != domain.QueueStream(action) {
				continue
			}
			keyOf[e.Execution] = e.ConcurrencyKey
			active[e.ConcurrencyKey]++
			out[e.ConcurrencyKey] = max(out[e.ConcurrencyKey], active[e.ConcurrencyKey])
		case domain.ExecutionCompleted, domain.ExecutionFailed, domain.ExecutionCancelled, domain.ExecutionTimedOut:
			if k, ok := keyOf[id]; ok {
				delete(keyOf, id)
				active[k]--
			}
		}
	}
	return out
}

// TestWithItemsWindow: 200 items with a window of 5, children completing in
// bursts of five at the same instant: never more than 5 in flight at any log
// position, children in item order, each with its item merged into the
// parent's input; the parent completes after the last child and lists its
// children in item order.
//
// With two executors deciding on the same log at once, each child is still
// requested once (its derived id's stream must not exist) and the window
// holds the same way.
func TestWithItemsWindow(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		for _, tc := range []struct {
			executors int
			embedded  bool
		}{{1, false}, {2, false}, {2, true}} {
			store := "memstore"
			if tc.embedded {
				store = "embedded"
			}
			t.Run(fmt.Sprintf("%d executors on %s", tc.executors, store), func(t *testing.T) {
				withItemsWindow(t, harnessConfig{single: single, executors: tc.executors, embedded: tc.embedded})
			})
		}
	})
}

func withItemsWindow(t *testing.T, cfg harnessConfig) {
	const n, window = 200, 5
	h := newHarness(t, cfg)
	g := newGate()
	h.addWorker("w1", 50, time.Hour, map[string]runner.Runner{"test.item": g})
	h.define(domain.Policy{Ref: "items", Runner: "test.item", MaxConcurrent: 50, MaxQueueLength: 1000})
	items := make([]json.RawMessage, n)
	for i := range items {
		if i%2 == 0 {
			items[i] = json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))
		} else {
			items[i] = json.RawMessage(fmt.Sprint(i))
		}
	}
	parent := h.requestItems("items", `{"base":"b","n":-1}`, items, window)

	released := 0
	for released < n {
		want := min(window, n-released)
		h.waitFor(fmt.Sprintf("a burst of %d after %d released", want, released), func() bool {
			if got := g.Waiting(); got > want {
				t.Fatalf("%d children running after %d released, window %d", got, released, window) // over-dispatch: no need to wait
			}
			return g.Waiting() == want
		})
		h.settle()
		if got := g.Waiting(); got != want {
			t.Fatalf("%d children running after %d released, window %d", got, released, window)
		}
		g.ReleaseAll() // the whole burst ends at the same instant
		released += want
	}
	x := h.waitStatus(parent, domain.StatusCompleted)
	st := x.State()
	var res struct{ Items, Requested, Completed, Failed int }
	if err := json.Unmarshal(st.Result, &res); err != nil || res.Items != n || res.Completed != n || res.Failed != 0 {
		t.Fatalf("parent result %s", st.Result)
	}

	recs := h.all()
	most, children := fanoutFold(t, recs, parent)
	if most != window || len(children) != n {
		t.Fatalf("at most %d children in flight, %d requested; want %d and %d", most, len(children), window, n)
	}
	if st.ChildrenAsked != n {
		t.Fatalf("the parent's stream says %d children requested", st.ChildrenAsked)
	}
	if !slices.Equal(st.Children, children) || len(st.Children) != n {
		t.Fatalf("the parent's children %d, the log's %d, not the same list in item order", len(st.Children), len(children))
	}
	for _, i := range []int{0, 1, 198, 199} {
		c := h.loaded(children[i])
		want := fmt.Sprintf(`{"base":"b","item":%d,"n":-1}`, i)
		if i%2 == 0 {
			want = fmt.Sprintf(`{"base":"b","n":%d}`, i)
		}
		if string(c.Input()) != want || c.Parent() != parent || c.ItemIndex() != i || c.Status() != domain.StatusCompleted {
			t.Fatalf("child %d: input %s parent %s index %d status %s", i, c.Input(), c.Parent(), c.ItemIndex(), c.Status())
		}
	}
	if rep := h.auditClean(); rep.ByStatus["completed"] != n+1 {
		t.Fatalf("by status %v", rep.ByStatus)
	}
	if len(h.more) > 0 {
		conflicts := h.exec.Stats.Conflicts.Load()
		for _, e := range h.more {
			conflicts += e.Stats.Conflicts.Load()
		}
		t.Logf("the executors lost %d races to each other, each refused by a stream's version", conflicts)
	}
}

// TestWithItemsFailureAndCancel: a parent fails when an item fails; a
// cancelled parent requests no more children, passes the cancellation on
// to those in flight (running ones through their worker, a waiting one by the
// executor) and ends after them. Children share the action's limit: with
// max_concurrent 2 and a window of 3, one child waits in the queue.
func TestWithItemsFailureAndCancel(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		h := newHarness(t, harnessConfig{single: single})
		g := newGate()
		maybe := runner.Func(func(_ context.Context, in json.RawMessage) (json.RawMessage, error) {
			var v struct{ Fail bool }
			_ = json.Unmarshal(in, &v)
			if v.Fail {
				return nil, &runner.Failure{Message: "item asked to fail"}
			}
			return json.RawMessage(`{}`), nil
		})
		h.addWorker("w1", 8, time.Hour, map[string]runner.Runner{"test.gate": g, "test.maybe": maybe})
		h.define(domain.Policy{Ref: "items.maybe", Runner: "test.maybe", MaxConcurrent: 4})
		h.define(domain.Policy{Ref: "items.gate", Runner: "test.gate", MaxConcurrent: 2})

		failing := h.requestItems("items.maybe", `{}`, []json.RawMessage{json.RawMessage(`{"fail":false}`), json.RawMessage(`{"fail":true}`), json.RawMessage(`{}`)}, 2)
		st := h.waitStatus(failing, domain.StatusFailed).State()
		if st.Code != domain.FailItems || st.Error != "1 of 3 items did not complete" {
			t.Fatalf("parent failed with code %q error %q", st.Code, st.Error)
		}

		ghost := h.requestItems("items.nope", `{}`, []json.RawMessage{json.RawMessage(`1`)}, 1)
		if rj, ok := h.waitEvent(domain.ExecutionStream(ghost), domain.TypeExecutionRejected)[1].ev.(domain.ExecutionRejected); !ok || rj.Code != domain.RejectUnknownAction {
			t.Fatalf("a parent of an unknown action: %+v", rj)
		}

		items := make([]json.RawMessage, 10)
		for i := range items {
			items[i] = json.RawMessage(fmt.Sprint(i))
		}
		cancelled := h.requestItems("items.gate", `{}`, items, 3)
		h.waitFor("two children running", func() bool { return g.Waiting() == 2 })
		h.settle()
		h.cancel(cancelled)
		st = h.waitStatus(cancelled, domain.StatusCancelled).State()
		if st.Code != domain.CancelRequested {
			t.Fatalf("parent cancelled with code %q", st.Code)
		}
		recs := h.all()
		most, children := fanoutFold(t, recs, cancelled)
		if len(children) != 3 || most != 3 {
			t.Fatalf("%d children requested, %d at most in flight; want 3 and 3", len(children), most)
		}
		byWorker := 0
		for _, c := range children {
			last := h.lastEvent(c)
			cc, ok := last.ev.(domain.ExecutionCancelled)
			if !ok || cc.Code != domain.CancelRequested {
				t.Fatalf("child %s ended with %s", c, last.env.Type)
			}
			if last.env.Owner == domain.OwnerWorker {
				byWorker++
			}
		}
		if byWorker != 2 {
			t.Fatalf("%d children cancelled by their worker, want the 2 running ones", byWorker)
		}
		if got := maxActive(recs, "items.gate")[""]; got != 2 {
			t.Fatalf("at most %d children held a slot, want max_concurrent 2", got)
		}
		h.auditClean()
	})
}

// TestConcurrencyKeysAreIndependent: with concurrency_key "tenant" and
// max_concurrent 1, each tenant has its own FIFO queue and its own slot; a
// request without the field is rejected with invalid_input.
func TestConcurrencyKeysAreIndependent(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		h := newHarness(t, harnessConfig{single: single})
		g := newGate()
		h.addWorker("w1", 8, time.Hour, map[string]runner.Runner{"test.job": g})
		h.define(domain.Policy{Ref: "keys", Runner: "test.job", MaxConcurrent: 1, ConcurrencyKey: "tenant"})
		a1 := h.request("keys", `{"tenant":"a"}`)
		a2 := h.request("keys", `{"tenant":"a"}`)
		b1 := h.request("keys", `{"tenant":"b"}`)
		n1 := h.request("keys", `{"tenant":7}`)
		b2 := h.request("keys", `{"tenant":"b"}`)
		none := h.request("keys", `{"other":1}`)

		h.waitFor("one per tenant running", func() bool { return g.Waiting() == 3 })
		h.quiesce()
		for id, want := range map[string]domain.Status{a1: domain.StatusRunning, b1: domain.StatusRunning, n1: domain.StatusRunning,
			a2: domain.StatusRequested, b2: domain.StatusRequested, none: domain.StatusRejected} {
			if got := h.loaded(id).State(); got.Status != want {
				t.Fatalf("%s is %s, want %s", id, got.Status, want)
			}
		}
		if rj := h.lastEvent(none).ev.(domain.ExecutionRejected); rj.Code != domain.RejectInvalidInput {
			t.Fatalf("rejected with code %q", rj.Code)
		}
		if got := h.loaded(n1).ConcurrencyKey(); got != "7" {
			t.Fatalf("key of a number %q", got)
		}
		g.ReleaseAll()
		h.waitFor("the second of each tenant", func() bool { return g.Waiting() == 2 })
		g.ReleaseAll()
		for _, id := range []string{a1, a2, b1, b2, n1} {
			h.waitStatus(id, domain.StatusCompleted)
		}
		recs := h.all()
		if got := maxActive(recs, "keys"); got["a"] != 1 || got["b"] != 1 || got["7"] != 1 {
			t.Fatalf("most active per key %v, want 1 each", got)
		}
		// b1 was granted while a1 held tenant a's slot: the queues are independent.
		pos := func(id, typ string) uint64 {
			for _, r := range h.stream(domain.ExecutionStream(id)) {
				if r.env.Type == typ {
					return r.env.Position
				}
			}
			t.Fatalf("%s has no %s", id, typ)
			return 0
		}
		if pos(b1, domain.TypeExecutionScheduling) > pos(a1, domain.TypeExecutionCompleted) {
			t.Fatal("tenant b waited for tenant a")
		}
		if pos(a2, domain.TypeExecutionScheduling) < pos(a1, domain.TypeExecutionCompleted) {
			t.Fatal("a2 granted while a1 held tenant a's only slot")
		}
		h.auditClean() // FIFO per key and the limit per key at every position
	})
}

// TestPauseHoldsGrants: while an action is paused nothing is granted,
// running executions go on and requests still queue; resuming grants them in
// order.
func TestPauseHoldsGrants(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		h := newHarness(t, harnessConfig{single: single})
		g := newGate()
		h.addWorker("w1", 8, time.Hour, map[string]runner.Runner{"test.job": g})
		h.define(domain.Policy{Ref: "pause", Runner: "test.job", MaxConcurrent: 5})
		ctx := context.Background()
		running := h.request("pause", "")
		h.waitFor("the first to run", func() bool { return g.Waiting() == 1 })
		if _, err := h.cmds.Pause(ctx, "pause", "maintenance"); err != nil {
			t.Fatal(err)
		}
		w1 := h.request("pause", "")
		w2 := h.request("pause", "")
		h.quiesce()
		g.ReleaseAll() // the running one goes on to its end while paused
		h.waitStatus(running, domain.StatusCompleted)
		h.quiesce()
		for _, id := range []string{w1, w2} {
			if got := h.loaded(id).Status(); got != domain.StatusRequested {
				t.Fatalf("%s is %s while paused", id, got)
			}
		}
		if _, err := h.cmds.Resume(ctx, "pause"); err != nil {
			t.Fatal(err)
		}
		h.waitFor("both to run after resume", func() bool { return g.Waiting() == 2 })
		g.ReleaseAll()
		h.waitStatus(w1, domain.StatusCompleted)
		h.waitStatus(w2, domain.StatusCompleted)

		var paused, resumed, ended uint64
		var grants []uint64
		for _, r := range h.all() {
			switch r.ev.(type) {
			case domain.ActionPaused:
				paused = r.env.Position
			case domain.ActionResumed:
				resumed = r.env.Position
			case domain.QueueGranted:
				grants = append(grants, r.env.Position)
			case domain.ExecutionCompleted:
				if _, id := domain.SplitStream(r.env.Stream); id == running {
					ended = r.env.Position
				}
			}
		}
		for _, p := range grants {
			if p > paused && p < resumed {
				t.Fatalf("a grant at %d, while paused from %d to %d", p, paused, resumed)
			}
		}
		if len(grants) != 3 || ended < paused || ended > resumed {
			t.Fatalf("%d grants; the running one ended at %d (paused %d..%d)", len(grants), ended, paused, resumed)
		}
		if _, err := h.cmds.Pause(ctx, "nope", ""); err == nil || !errors.Is(err, command.ErrUnknownAction) {
			t.Fatalf("Pause of an unknown action = %v, want ErrUnknownAction", err)
		}
		h.auditClean() // also: no grant while paused
	})
}

// TestPolicyChangeAppliesFromTheNextGrant: raising max_concurrent while a
// queue waits gives more grants after the change event, never before; the
// change moved the queue stream's version in the same commit (single-stream:
// its announcement moved it before, and no grant came in between).
func TestPolicyChangeAppliesFromTheNextGrant(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		h := newHarness(t, harnessConfig{single: single})
		g := newGate()
		h.addWorker("w1", 8, time.Hour, map[string]runner.Runner{"test.job": g})
		p := domain.Policy{Ref: "change", Runner: "test.job", MaxConcurrent: 1}
		h.define(p)
		var ids []string
		for range 4 {
			ids = append(ids, h.request("change", ""))
		}
		h.waitFor("one running", func() bool { return g.Waiting() == 1 })
		h.quiesce()
		if g.Waiting() != 1 {
			t.Fatalf("%d running under max_concurrent 1", g.Waiting())
		}
		p.MaxConcurrent = 3
		if changed, err := h.cmds.ChangePolicy(context.Background(), p); err != nil || !changed {
			t.Fatalf("ChangePolicy: %v %v", changed, err)
		}
		h.waitFor("three running", func() bool { return g.Waiting() == 3 })
		h.quiesce()
		if g.Waiting() != 3 {
			t.Fatalf("%d running under max_concurrent 3", g.Waiting())
		}

		var changeAt uint64
		before, after := 0, 0
		recs := h.all()
		announced := false // single-stream: the fence comes first and announces the change
		for i, r := range recs {
			switch e := r.ev.(type) {
			case domain.QueueActionChanged:
				announced = single && e.Change == domain.TypeActionPolicyChanged && len(e.Event) > 0
			case domain.ActionPolicyChanged:
				changeAt = r.env.Position
				if single {
					if !announced {
						t.Fatal("the policy change is not announced by its queue fence, with no grant in between")
					}
					break
				}
				if f, ok := recs[i+1].ev.(domain.QueueActionChanged); !ok || recs[i+1].env.Stream != domain.QueueStream("change") || f.Change != domain.TypeActionPolicyChanged {
					t.Fatalf("the policy change is not followed by its queue fence: %s", recs[i+1].env.Type)
				}
			case domain.QueueGranted:
				announced = false
				if changeAt == 0 {
					before++
				} else {
					after++
				}
			}
		}
		if before != 1 || after != 2 {
			t.Fatalf("%d grants before the change, %d after; want 1 and 2", before, after)
		}
		p.MaxConcurrent = 4
		if _, err := h.cmds.ChangePolicy(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		h.waitFor("the fourth", func() bool { return g.Waiting() == 4 })
		g.ReleaseAll()
		for _, id := range ids {
			h.waitStatus(id, domain.StatusCompleted)
		}
		h.auditClean()
	})
}

// TestQueueFullAndOnLimitReject: a request beyond max_queue_length is
// rejected with queue_full; with on_limit "reject", a request with no slot
// free right now is rejected with no_slot.
func TestQueueFullAndOnLimitReject(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		h := newHarness(t, harnessConfig{single: single})
		g := newGate()
		h.addWorker("w1", 8, time.Hour, map[string]runner.Runner{"test.job": g})
		h.define(domain.Policy{Ref: "full", Runner: "test.job", MaxConcurrent: 1, MaxQueueLength: 2})
		h.define(domain.Policy{Ref: "now", Runner: "test.job", MaxConcurrent: 1, OnLimit: domain.OnLimitReject})
		f1 := h.request("full", "")
		h.waitFor("f1 to run", func() bool { return g.Waiting() == 1 })
		f2, f3, f4 := h.request("full", ""), h.request("full", ""), h.request("full", "")
		n1 := h.request("now", "")
		h.waitFor("n1 to run", func() bool { return g.Waiting() == 2 })
		n2 := h.request("now", "")
		for id, code := range map[string]string{f4: domain.RejectQueueFull, n2: domain.RejectNoSlot} {
			h.waitStatus(id, domain.StatusRejected)
			last := h.lastEvent(id)
			if rj := last.ev.(domain.ExecutionRejected); rj.Code != code || last.env.Owner != domain.OwnerExecutor {
				t.Fatalf("%s rejected with %q by %s, want %q", id, rj.Code, last.env.Owner, code)
			}
		}
		for _, id := range []string{f1, f2, f3, n1} {
			h.waitFor("completion", func() bool { // release whatever runs until it is done
				if g.Waiting() > 0 {
					g.ReleaseAll()
				}
				return h.loaded(id).Status() == domain.StatusCompleted
			})
		}
		h.auditClean()
	})
}

// TestRateLimit: grants are limited to count per window of log time. With
// on_limit "reject" a request beyond it is rejected (rate_limited); with
// "queue" it waits until the window allows it.
func TestRateLimit(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		h := newHarness(t, harnessConfig{single: single})
		h.addWorker("w1", 8, time.Hour, nil)
		rl := &domain.RateLimit{Count: 2, PerSeconds: 10}
		h.define(domain.Policy{Ref: "rate.reject", Runner: "core.noop", MaxConcurrent: 10, RateLimit: rl, OnLimit: domain.OnLimitReject})
		h.define(domain.Policy{Ref: "rate.delay", Runner: "core.noop", MaxConcurrent: 10, RateLimit: rl})

		r1, r2, r3 := h.request("rate.reject", ""), h.request("rate.reject", ""), h.request("rate.reject", "")
		h.waitStatus(r1, domain.StatusCompleted)
		h.waitStatus(r2, domain.StatusCompleted)
		h.waitStatus(r3, domain.StatusRejected)
		if rj := h.lastEvent(r3).ev.(domain.ExecutionRejected); rj.Code != domain.RejectRateLimited {
			t.Fatalf("r3 rejected with %q", rj.Code)
		}

		var delayed []string
		for range 5 {
			delayed = append(delayed, h.request("rate.delay", ""))
		}
		done := func() (n int) {
			for _, id := range delayed {
				if h.loaded(id).Status() == domain.StatusCompleted {
					n++
				}
			}
			return n
		}
		h.waitFor("two delayed ones", func() bool { return done() == 2 })
		h.quiesce()
		if n := done(); n != 2 {
			t.Fatalf("%d completed within one window of 2", n)
		}
		h.advance(11 * time.Second)
		h.waitFor("two more", func() bool { return done() == 4 })
		h.quiesce()
		if n := done(); n != 4 {
			t.Fatalf("%d completed within two windows", n)
		}
		h.advance(11 * time.Second)
		h.waitFor("the last", func() bool { return done() == 5 })

		r4 := h.request("rate.reject", "") // a new window for the other action too
		h.waitStatus(r4, domain.StatusCompleted)

		// Fold the grants' log times: never more than 2 in any 10s window.
		var times []time.Time
		for _, r := range h.all() {
			if _, ok := r.ev.(domain.QueueGranted); ok && r.env.Stream == domain.QueueStream("rate.delay") {
				times = append(times, r.env.Time)
			}
		}
		for i, t1 := range times {
			n := 0
			for _, t2 := range times[:i+1] {
				if t1.Sub(t2) < 10*time.Second {
					n++
				}
			}
			if n > 2 {
				t.Fatalf("grant %d at %s: %d grants in the 10s before it", i, t1, n)
			}
		}
		h.auditClean() // the audit judges each grant by the rate limit too
	})
}

// TestPauseFencesAGrantInFlight: a grant decided before a pause but
// appended after it fails on the queue stream's version (the pause moved it
// with queue.action_changed), so the log never shows a grant after a pause.
func TestPauseFencesAGrantInFlight(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		held := make(chan struct{}, 1)
		release := make(chan struct{})
		var once sync.Once
		h := newHarness(t, harnessConfig{single: single, beforeAppend: func(what string) {
			if what == "grant fence" {
				once.Do(func() {
					held <- struct{}{}
					<-release
				})
			}
		}})
		h.addWorker("w1", 4, time.Hour, nil)
		h.define(domain.Policy{Ref: "fence", Runner: "core.noop"})
		id := h.request("fence", "")
		select {
		case <-held: // the executor has decided the grant and holds it
		case <-time.After(waitLimit):
			t.Fatal("no grant decided")
		}
		if _, err := h.cmds.Pause(context.Background(), "fence", ""); err != nil {
			t.Fatal(err)
		}
		close(release)
		h.quiesce()
		if got := h.loaded(id).Status(); got != domain.StatusRequested {
			t.Fatalf("%s while paused", got)
		}
		if h.exec.Stats.Conflicts.Load() < 1 {
			t.Fatal("the grant in flight was not refused")
		}
		if _, err := h.cmds.Resume(context.Background(), "fence"); err != nil {
			t.Fatal(err)
		}
		h.waitStatus(id, domain.StatusCompleted)
		h.auditClean()
	})
}
