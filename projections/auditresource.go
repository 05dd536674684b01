package projections

import (
	"fmt"
	"slices"
	"time"

	"github.com/turnstile/turnstile/domain"
)

// RuleResource names violations of the resources' rules (docs/policies.md,
// "Resources").
const RuleResource = "resource"

// auditResources checks, at every resource.granted, that the grant keeps
// the resource's limit and rate for its key value (domain.Resources.
// CheckGrant), that its key value is the one the execution's input gives
// and its units those its action's policy names, and the order rule: it
// passes no older ready waiter of the same resource key value (one that was
// its queue's grantable head, requested before the grant's decision and
// ready since before it); and at every execution.scheduling that the
// execution holds every resource its policy needs.
type auditResources struct {
	rs         *domain.Resources
	pos        map[string]uint64 // execution → position of its request or requeue (its FIFO place)
	readySince map[string]uint64 // action ref → last position that may have made its waiters ready
	workers    map[string]*auditWorker
	times      [1 << 14]struct {
		pos uint64
		at  time.Time
	} // recent positions' log times (ring)
}

func newAuditResources() *auditResources {
	return &auditResources{rs: domain.NewResources(), pos: map[string]uint64{}, readySince: map[string]uint64{}, workers: map[string]*auditWorker{}}
}

// auditWorker is a worker as the order rule needs it: whether it accepts
// work, and since which position its incarnation does.
type auditWorker struct {
	w     *domain.Worker
	since uint64
}

// served reports whether a worker that accepts work and serves runner
// registered before position seen: a waiter whose runner nobody served
// when the grant was decided is not ready (it reserves nothing).
func (a *auditResources) served(runner string, seen uint64) bool {
	for _, aw := range a.workers {
		if aw.since < seen && aw.w.Accepting() && (len(aw.w.Runners()) == 0 || slices.Contains(aw.w.Runners(), runner)) {
			return true
		}
	}
	return false
}

// timeAt returns the log time of position p if it is recent enough to be
// remembered.
func (a *auditResources) timeAt(p uint64) (time.Time, bool) {
	t := &a.times[p%uint64(len(a.times))]
	return t.at, t.pos == p && !t.at.IsZero()
}

// check judges ev (at env) before it is folded; queues and execs are the
// audit's folds before it.
func (a *auditResources) check(queues *domain.Queues, execs map[string]*domain.Execution, env *domain.Envelope, ev domain.Event) string {
	switch e := ev.(type) {
	case domain.ResourceGranted:
		_, name := domain.SplitStream(env.Stream)
		if err := a.rs.CheckGrant(name, e.Execution, e.Key, e.Units, env.Time); err != nil {
			return err.Error()
		}
		x := execs[e.Execution]
		var q *domain.Queue
		if x != nil {
			q = queues.Get(x.Action())
		} else if w, ok := queues.Waiting(e.Execution); ok {
			x, q = w, queues.Get(w.Action())
		}
		if x == nil || q == nil {
			return fmt.Sprintf("grant of %s: no such live execution", e.Execution)
		}
		units := 0
		for _, n := range q.Policy().Resources {
			if n.Name == name {
				units = n.Units
			}
		}
		if units != e.Units {
			return fmt.Sprintf("grant of %s takes %d units of resource %q; the policy of %q names %d", e.Execution, e.Units, name, q.Ref, units)
		}
		r := a.rs.Get(name)
		if want := r.Limit().KeyValue(x.Input()); want != e.Key {
			return fmt.Sprintf("grant of %s holds key %q of resource %q; its input's %q gives %q", e.Execution, e.Key, name, r.Limit().KeyField, want)
		}
		return a.checkOrder(queues, name, e, x.Priority(), env)
	case domain.ExecutionScheduling:
		_, id := domain.SplitStream(env.Stream)
		x := execs[id]
		if x == nil {
			return ""
		}
		if q := queues.Get(x.Action()); q != nil {
			for _, n := range q.Policy().Resources {
				if !a.rs.Holds(id, n.Name) {
					return fmt.Sprintf("execution %s took its slot without units of resource %q", id, n.Name)
				}
			}
		}
	}
	return ""
}

// checkOrder: no waiter that needs the same resource key value, is its
// queue's grantable head (at the time of the decision's position), was
// requested before the decision and comes before the grant (priority, then
// request order) waits while the grant passes it.
func (a *auditResources) checkOrder(queues *domain.Queues, name string, g domain.ResourceGranted, prio int, env *domain.Envelope) string {
	if g.Seen == 0 {
		return ""
	}
	at, ok := a.timeAt(g.Seen - 1)
	if !ok {
		return "" // decided on a position too old to judge its time: not judged
	}
	me := domain.Waiter{Execution: g.Execution, Position: a.pos[g.Execution], Priority: prio}
	r := a.rs.Get(name)
	for _, ref := range queues.Refs() {
		q := queues.Get(ref)
		needs := false
		for _, n := range q.Policy().Resources {
			needs = needs || n.Name == name
		}
		if !needs || a.readySince[ref] >= g.Seen || !a.served(q.Policy().Runner, g.Seen) {
			continue
		}
		for _, w := range q.Grantable(1<<30, at) {
			if w.Execution == g.Execution || w.Position >= g.Seen || !domain.GrantsBefore(w, me) {
				continue
			}
			wx, ok := queues.Waiting(w.Execution)
			if !ok || r.Limit().KeyValue(wx.Input()) != g.Key {
				continue
			}
			return fmt.Sprintf("grant of %s passes %s (requested at position %d), ready for resource %q key %q before it", g.Execution, w.Execution, w.Position, name, g.Key)
		}
	}
	return ""
}

// fold records ev (at env), before queues folds it.
func (a *auditResources) fold(queues *domain.Queues, env *domain.Envelope, ev domain.Event, cat, id string) {
	t := &a.times[env.Position%uint64(len(a.times))]
	t.pos, t.at = env.Position, env.Time
	switch cat {
	case domain.StreamResource:
		a.rs.Apply(env, ev)
		return
	case domain.StreamQueue:
		a.readySince[id] = env.Position
		return
	case domain.StreamAction:
		a.readySince[id] = env.Position
		return
	case domain.StreamWorker:
		aw := a.workers[id]
		if aw == nil {
			aw = &auditWorker{w: domain.NewWorker(id)}
			a.workers[id] = aw
		}
		if _, reg := ev.(domain.WorkerRegistered); reg {
			aw.since = env.Position
		}
		aw.w.Apply(ev, env.Version, env.Time)
		return
	case domain.StreamExecution:
	default:
		return
	}
	switch ev.(type) {
	case domain.ExecutionRequested, domain.ExecutionRequeued:
		a.pos[id] = env.Position
	case domain.ExecutionRetryScheduled, domain.ExecutionCompleted, domain.ExecutionFailed, domain.ExecutionTimedOut, domain.ExecutionCancelled, domain.ExecutionRejected:
		if ref, _, granted, ok := queues.Locate(id); ok && granted {
			a.readySince[ref] = env.Position // a slot of ref comes free
		}
		a.rs.Release(id)
		if _, back := ev.(domain.ExecutionRetryScheduled); !back {
			delete(a.pos, id)
		}
	}
}
