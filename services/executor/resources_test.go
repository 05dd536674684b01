package executor_test

import (
	"context"
	"encoding/json"
	"errors"
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

func (h *harness) defineResource(name string, l domain.ResourceLimit) {
	h.t.Helper()
	if _, _, err := h.cmds.DefineResource(context.Background(), name, l); err != nil {
		h.t.Fatal(err)
	}
}

// maxHeld folds the log's resource.granted events and the ends of their
// holders and returns the most units of resource name (per key) held at
// once: what two executors, or one, may never push past the limit.
func (h *harness) maxHeld(name string) int {
	held := map[string]int{}  // execution → units
	byKey := map[string]int{} // key → units
	keyOf := map[string]string{}
	most := 0
	for _, r := range h.all() {
		switch e := r.ev.(type) {
		case domain.ResourceGranted:
			if r.env.Stream != domain.ResourceStream(name) {
				continue
			}
			held[e.Execution], keyOf[e.Execution] = e.Units, e.Key
			byKey[e.Key] += e.Units
			most = max(most, byKey[e.Key])
		case domain.ExecutionCompleted, domain.ExecutionFailed, domain.ExecutionCancelled, domain.ExecutionTimedOut, domain.ExecutionRetryScheduled:
			_, id := domain.SplitStream(r.env.Stream)
			if u, ok := held[id]; ok {
				byKey[keyOf[id]] -= u
				delete(held, id)
			}
		}
	}
	return most
}

// TestResourceSharedAcrossActions: two actions that need one resource of
// max_concurrent 2 run at most 2 executions between them, whatever their
// own slots, granted in request order across both actions; every unit
// comes back when they end. Catches: a resource counted per action, units
// never released (the third never runs), grants out of FIFO order.
func TestResourceSharedAcrossActions(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	g := newGate()
	h.addWorker("w1", 8, time.Hour, map[string]runner.Runner{"test.gate": g})
	h.defineResource("stripe", domain.ResourceLimit{MaxConcurrent: 2})
	for _, ref := range []string{"a", "b"} {
		h.define(domain.Policy{Ref: ref, Runner: "test.gate", MaxConcurrent: 5, Resources: []domain.ResourceNeed{{Name: "stripe"}}})
	}
	var ids []string
	for _, ref := range []string{"a", "b", "a", "b", "a", "b"} {
		ids = append(ids, h.request(ref, ""))
		h.quiesce()
	}
	h.waitFor("two runs", func() bool { return g.Waiting() == 2 })
	h.quiesce()
	if g.Started() != 2 {
		t.Fatalf("%d runs started with max_concurrent 2 across both actions", g.Started())
	}
	h.drain(g, ids)
	if got := h.resourceGrantOrder(); !slices.Equal(got, ids) {
		t.Fatalf("granted %v\nwant    %v (request order)", got, ids)
	}
	if m := h.maxHeld("stripe"); m != 2 {
		t.Fatalf("at most %d units held at once, want 2", m)
	}
	h.auditClean()
}

// resourceGrantOrder lists the executions of the log's resource.granted
// events in log order (one per execution: its first).
func (h *harness) resourceGrantOrder() []string {
	var out []string
	for _, r := range h.all() {
		if g, ok := r.ev.(domain.ResourceGranted); ok && !slices.Contains(out, g.Execution) {
			out = append(out, g.Execution)
		}
	}
	return out
}

// drain releases g's runs until every one of ids has completed.
func (h *harness) drain(g *gate, ids []string) {
	h.t.Helper()
	deadline := time.Now().Add(waitLimit)
	for _, id := range ids {
		for {
			x := h.loaded(id)
			if x != nil && x.Status() == domain.StatusCompleted {
				break
			}
			if time.Now().After(deadline) {
				h.t.Fatalf("%s not completed: %v", id, x.Status())
			}
			g.ReleaseAll()
			time.Sleep(time.Millisecond)
		}
	}
}

// TestResourceHeadReserves: a waiter that needs 2 units of a resource with
// 1 free is not passed by a later one that needs 1: the freed units go to
// it first. Catches: small grants starving a big one (no reservation).
func TestResourceHeadReserves(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	g := newGate()
	h.addWorker("w1", 8, time.Hour, map[string]runner.Runner{"test.gate": g})
	h.defineResource("gpu", domain.ResourceLimit{MaxConcurrent: 2})
	h.define(domain.Policy{Ref: "small", Runner: "test.gate", MaxConcurrent: 5, Resources: []domain.ResourceNeed{{Name: "gpu", Units: 1}}})
	h.define(domain.Policy{Ref: "big", Runner: "test.gate", MaxConcurrent: 5, Resources: []domain.ResourceNeed{{Name: "gpu", Units: 2}}})
	s1 := h.request("small", "")
	h.waitFor("s1 runs", func() bool { return g.Waiting() == 1 })
	b1 := h.request("big", "")
	s2 := h.request("small", "")
	h.quiesce()
	if g.Started() != 1 {
		t.Fatalf("%d runs started: s2 took the unit b1 waits for", g.Started())
	}
	g.ReleaseAll()
	h.waitStatus(s1, domain.StatusCompleted)
	h.waitFor("b1 runs", func() bool { return g.Waiting() == 1 })
	h.quiesce()
	if g.Started() != 2 {
		t.Fatalf("%d runs started while b1 holds both units", g.Started())
	}
	h.drain(g, []string{b1, s2})
	if got := h.resourceGrantOrder(); !slices.Equal(got, []string{s1, b1, s2}) {
		t.Fatalf("granted %v, want s1 b1 s2", got)
	}
	h.auditClean()
}

// TestResourcePerKey: a keyed resource limits each value of its key field
// apart, across actions; a waiter held only by its own action's slot does
// not hold back another waiter on the resource. Catches: the key ignored
// (one limit for all tenants).
func TestResourcePerKey(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	g := newGate()
	h.addWorker("w1", 8, time.Hour, map[string]runner.Runner{"test.gate": g})
	h.defineResource("api", domain.ResourceLimit{MaxConcurrent: 1, KeyField: "tenant"})
	h.define(domain.Policy{Ref: "a", Runner: "test.gate", MaxConcurrent: 1, Resources: []domain.ResourceNeed{{Name: "api"}}})
	// b's waiters queue per tenant: within one queue (and key value) FIFO
	// holds as ever, so b2 would otherwise wait behind b1.
	h.define(domain.Policy{Ref: "b", Runner: "test.gate", MaxConcurrent: 5, ConcurrencyKey: "tenant", Resources: []domain.ResourceNeed{{Name: "api"}}})
	req := func(ref, tenant string) string {
		return h.requestWith(command.Request{Action: ref, Input: json.RawMessage(`{"tenant":"` + tenant + `","n":1}`)})
	}
	a1 := req("a", "acme")
	h.waitFor("a1 runs", func() bool { return g.Waiting() == 1 })
	a2 := req("a", "zeta") // waits for a's own slot only
	b1 := req("b", "acme") // waits for acme's unit
	b2 := req("b", "zeta") // zeta is free: a2 waits for its slot, not for zeta
	h.waitFor("b2 runs", func() bool { return g.Waiting() == 2 })
	h.quiesce()
	if x := h.loaded(b1); x.Status() != domain.StatusRequested {
		t.Fatalf("b1 (acme) is %s while a1 holds acme's one unit", x.Status())
	}
	ex := h.explain(b1)
	want := projections.Reason{Reason: projections.WaitResource, Resource: "api", Key: "acme", InUse: 1, MaxConcurrent: 1}
	if !slices.Equal(ex.WaitingFor, []string{projections.WaitResource}) || len(ex.Reasons) != 1 || ex.Reasons[0] != want {
		t.Fatalf("explain b1: %v %+v, want resource api key acme 1 of 1 in use", ex.WaitingFor, ex.Reasons)
	}
	if ex := h.explain(a2); !slices.Contains(ex.WaitingFor, projections.WaitSlot) || len(ex.Reasons) != len(ex.WaitingFor) || ex.Reasons[0].Reason != ex.WaitingFor[0] {
		t.Fatalf("explain a2 (its own slot, and zeta b2 holds): %v %+v", ex.WaitingFor, ex.Reasons)
	}
	h.drain(g, []string{a1, a2, b1, b2})
	if m := h.maxHeld("api"); m != 1 {
		t.Fatalf("at most %d units of one key held at once, want 1", m)
	}
	h.auditClean()
}

// TestResourceTwoExecutorsNeverOverGrant: two executors deciding on one
// log, many waiters of two actions sharing a resource of 3: the log never
// shows more than 3 units held. Catches: a grant not fenced on the
// resource stream's version.
func TestResourceTwoExecutorsNeverOverGrant(t *testing.T) {
	h := newHarness(t, harnessConfig{executors: 2})
	h.addWorker("w1", 16, time.Hour, nil)
	h.defineResource("db", domain.ResourceLimit{MaxConcurrent: 3})
	for _, ref := range []string{"a", "b"} {
		h.define(domain.Policy{Ref: ref, Runner: runner.NameNoop, MaxConcurrent: 10, Resources: []domain.ResourceNeed{{Name: "db"}}})
	}
	var ids []string
	for i := range 40 {
		ids = append(ids, h.request([]string{"a", "b"}[i%2], ""))
	}
	for _, id := range ids {
		h.waitStatus(id, domain.StatusCompleted)
	}
	if m := h.maxHeld("db"); m > 3 {
		t.Fatalf("%d units held at once, max_concurrent 3", m)
	}
	h.auditClean()
}

// TestResourceSingleStreamLog: on a log without atomic multi-stream
// appends (as KurrentDB), a resource cannot be defined (400, nothing
// written), and an execution whose action needs one that the log defines
// anyway is never granted, while other actions run. Catches: a grant fenced
// on one stream of several (two executors could over-grant), or a resource
// accepted where it cannot be fenced.
func TestResourceSingleStreamLog(t *testing.T) {
	h := newHarness(t, harnessConfig{single: true})
	h.addWorker("w1", 4, time.Hour, nil)
	ctx := context.Background()
	head, _ := h.store.Head(ctx)
	if _, _, err := h.cmds.DefineResource(ctx, "db", domain.ResourceLimit{MaxConcurrent: 1}); !errors.Is(err, domain.ErrInvalidRequest) {
		t.Fatalf("define on a single-stream log: %v, want ErrInvalidRequest", err)
	}
	if after, _ := h.store.Head(ctx); after != head {
		t.Fatalf("refused definition appended %d events", after-head)
	}
	env, err := codec.Events.Encode(uuid.New(), domain.ResourceDefined{ResourceLimit: domain.ResourceLimit{MaxConcurrent: 1}}, domain.OwnerAPI, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Append(ctx, domain.ResourceStream("db"), eventstore.NoStream, env); err != nil {
		t.Fatal(err)
	}
	h.define(domain.Policy{Ref: "needs", Runner: runner.NameNoop, Resources: []domain.ResourceNeed{{Name: "db"}}})
	h.define(domain.Policy{Ref: "plain", Runner: runner.NameNoop})
	x := h.request("needs", "")
	y := h.request("plain", "")
	h.waitStatus(y, domain.StatusCompleted)
	h.quiesce()
	if got := h.loaded(x).Status(); got != domain.StatusRequested {
		t.Fatalf("an execution needing a resource is %s on a single-stream log", got)
	}
	h.auditClean()
}

// TestResourceUnservedWaiterReservesNothing: a waiter whose runner no
// worker serves is not ready: it does not hold the resource back from a
// later waiter of a served action, and the audit agrees. Catches: one
// action nobody serves holding a shared resource for ever.
func TestResourceUnservedWaiterReservesNothing(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.addWorker("w1", 4, time.Hour, nil)
	h.defineResource("db", domain.ResourceLimit{MaxConcurrent: 1})
	h.define(domain.Policy{Ref: "orphan", Runner: "nobody.runs.it", Resources: []domain.ResourceNeed{{Name: "db"}}})
	h.define(domain.Policy{Ref: "served", Runner: runner.NameNoop, Resources: []domain.ResourceNeed{{Name: "db"}}})
	o := h.request("orphan", "")
	s := h.request("served", "")
	h.waitStatus(s, domain.StatusCompleted)
	if got := h.loaded(o).Status(); got != domain.StatusRequested {
		t.Fatalf("orphan is %s", got)
	}
	h.auditClean()
}
