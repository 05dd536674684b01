// Grants and handoffs: the heads of the queues, highest priority then
// oldest request first across all queues, get a slot while workers have free ones (fenced by the
// queue stream's version: never more than max_concurrent, never out of FIFO
// order, within the rate limit), and in the same decision a handoff to a
// free worker that runs their action. A grant the log shows without its
// handoff (a single-stream grant cut short) is completed the same way. Both
// go through one helper, grantAndHand.
//
// Writes: queue.granted on queue-<ref>; execution.scheduling and
// execution.scheduled (the handoff) on execution-<id>, after it. When:
// every cycle.

package executor

import (
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/services/repository"
)

// rateMargin is how much earlier than its clock the executor judges the
// rate limit. The audit judges a grant at its commit time, which must not be
// before the decision's time; a store that rounds commit times down (the
// embedded store keeps microseconds) could otherwise put a grant a fraction
// of a microsecond before the window allowed it. Judging earlier only ever
// allows fewer grants.
const rateMargin = time.Millisecond

// decideGrants grants the heads of the queues, oldest request first across
// all queues, while workers have free slots, each with its handoff in the
// same atomic append as the grant (on a store without atomic multi-stream
// appends: after it, see seqEach). First it completes the handoffs of grants
// the log shows without one. A queue with an announced action change not yet
// in the action stream grants nothing.
func (e *Executor) decideGrants(ops []op, now time.Time) []op {
	var queues []*domain.Queue // those that may grant
	for _, ref := range e.state.Queues.Refs() {
		q := e.state.Queues.Get(ref)
		if _, announced := e.state.Announced[ref]; announced || q.Waiting() == 0 || e.busy(domain.QueueStream(ref)) {
			continue
		}
		queues = append(queues, q)
	}
	if len(queues) == 0 && len(e.state.Unscheduled) == 0 {
		return ops // nothing to hand: the free workers are not even counted (with many idle workers, that is most of an idle cycle)
	}
	workers := e.freeWorkers()
	if len(workers) == 0 {
		return ops
	}
	ops = e.decideUnscheduled(ops, workers)
	free := slots(workers)
	m := mergeScratch.Get().(*grantMerge)
	defer func() { m.reset(); mergeScratch.Put(m) }()
	for _, q := range queues {
		p := q.Policy()
		n := free
		if p.Resources != nil {
			n = allReady // every ready waiter: one the cycle cannot grant reserves its resources (resources.go)
		}
		m.add(q, q.Grantable(n, now.Add(-rateMargin)), p.MaxConcurrentTotal > 0)
	}
	var rc *resCycle // made by the cycle's first candidate that needs resources
	perQueue := map[string]*op{}
	var order []string
	qVersion := map[string]int64{}
	// A waiter that cannot be granted now (its stream awaits one of our
	// writes, such as its queue timeout or cancellation in this very cycle,
	// or no worker runs its action) holds back everyone behind it in its
	// key's queue: granting past it could commit before it leaves the queue
	// (or if its own write failed), out of FIFO order.
	blocked := map[[2]string]bool{}
	for free > 0 && len(ops)+len(perQueue) < e.cfg.MaxBatch {
		c, more := m.next()
		if !more {
			break
		}
		p := c.q.Policy()
		qk := [2]string{c.q.Ref, c.w.Key}
		if p.MaxConcurrentTotal > 0 {
			// A round robin that skips a key value would skip it again
			// next cycle: a waiter that cannot be granted holds back the
			// rest of its round.
			qk[1] = "\x00total"
		}
		x := e.state.Execution(c.w.Execution)
		var held []resHeld // the units it needs, nil without resources
		opKey := c.q.Ref
		if p.Resources != nil {
			if rc == nil {
				rc = newResCycle()
			}
			held = rc.needs(e, x, p.Resources)
			opKey = resourcesOp // grants that need resources share one append: their fences with them
		}
		if blocked[qk] {
			e.reserve(rc, held, p.Runner)
			continue
		}
		blocked[qk] = true // unless granted below
		xs := domain.ExecutionStream(c.w.Execution)
		if x == nil || e.busy(xs) || (held != nil && !rc.fits(e, held, now.Add(-rateMargin))) {
			e.reserve(rc, held, p.Runner)
			continue
		}
		// The fence is the grant's queue.granted, in its queue's op (the
		// queue's first grant of this cycle creates it), and its
		// resource.granted events, in the same op.
		a, ok := e.grantAndHand(x, xs, c.w.Key, c.q, workers, func() uuid.UUID {
			o := perQueue[opKey]
			if o == nil {
				o = &op{what: "grant " + opKey, count: &e.Stats.Grants, grants: true, seq: seqEach}
				perQueue[opKey] = o
				qVersion[c.q.Ref] = c.q.Version()
			} else if held != nil { // (the op of several queues' grants)
				if _, ok := qVersion[c.q.Ref]; !ok {
					qVersion[c.q.Ref] = c.q.Version()
				}
			}
			id := e.queueGrant(o, c.q.Ref, qVersion, domain.QueueGranted{Execution: c.w.Execution, ConcurrencyKey: c.w.Key, Seen: e.state.Next})
			for _, h := range held {
				e.resourceGrant(o, rc, h.name, domain.ResourceGranted{Execution: c.w.Execution, Key: h.key, Units: h.units, Seen: e.state.Next})
			}
			return id
		})
		if !ok {
			e.reserve(rc, held, p.Runner)
			continue
		}
		rc.take(held)
		blocked[qk] = false
		o := perQueue[opKey]
		if o.n == 0 { // the op's first grant in this cycle
			order = append(order, opKey)
		}
		o.appends = append(o.appends, a)
		o.n++
		free--
	}
	for _, ref := range order {
		o := perQueue[ref]
		ops = append(ops, *o)
	}
	return ops
}

// queueGrant adds a queue.granted event to the op's queue-stream append,
// creating it (fenced on the queue's version) on first use, and returns the
// event's id.
func (e *Executor) queueGrant(o *op, ref string, qVersion map[string]int64, g domain.QueueGranted) uuid.UUID {
	qs := domain.QueueStream(ref)
	for i := range o.appends {
		if o.appends[i].Stream == qs {
			a := &o.appends[i]
			v := qVersion[ref] + int64(len(a.Events)) + 1
			env, _ := codec.Events.Encode(repository.EventID(e.cfg.Name, qs, v, g.EventType()), g, domain.OwnerExecutor, e.cfg.Name)
			a.Events = append(a.Events, env)
			e.awaiting[qs] = uint64(v)
			return env.ID
		}
	}
	a := e.stage(qs, qVersion[ref], g)
	o.appends = append([]eventstore.StreamAppend{a}, o.appends...)
	return a.Events[0].ID
}

// decideUnscheduled completes grants whose handoff the log does not show
// (a single-stream grant cut short after its queue.granted): the
// execution's execution.scheduling and execution.scheduled, at its current
// version, with ids derived from the grant's. An execution asked to cancel
// is left to decideAttention, which ends it and frees the slot.
func (e *Executor) decideUnscheduled(ops []op, workers []*freeWorker) []op {
	for _, id := range sortedKeys(e.state.Unscheduled) {
		if len(ops) >= e.cfg.MaxBatch {
			break
		}
		x := e.state.Execution(id)
		xs := domain.ExecutionStream(id)
		if x == nil || x.CancelRequested() || e.busy(xs) || !e.ripe("grant "+id) {
			continue
		}
		ref, key, _, ok := e.state.Queues.Locate(id)
		q := e.state.Queues.Get(ref)
		if !ok || q == nil {
			continue
		}
		a, ok := e.grantAndHand(x, xs, key, q, workers, func() uuid.UUID { return e.state.Unscheduled[id] })
		if !ok {
			continue
		}
		ops = append(ops, op{what: "handoff " + id, count: &e.Stats.Repairs, appends: []eventstore.StreamAppend{a}})
	}
	return ops
}

// grantAndHand decides the slot grant of execution x (stream xs), waiting
// under key in queue q, and on the state that grant leads to its handoff to
// the free worker with the most slots that runs q's runner: both events in
// one append to xs, staged after the fence event whose id fence returns,
// and the handoff recorded as in hand. fence is called only once both
// events are decided, so a pair the rule refuses stages nothing, not even
// its fence. It reports false, having recorded nothing, when no worker is
// free for x or the rule refuses either event.
func (e *Executor) grantAndHand(x *domain.Execution, xs, key string, q *domain.Queue, workers []*freeWorker, fence func() uuid.UUID) (eventstore.StreamAppend, bool) {
	p := q.Policy()
	wk := pickWorker(workers, p.Runner, x.ID())
	if wk == nil {
		return eventstore.StreamAppend{}, false
	}
	grant, err := x.Grant(key)
	if err != nil {
		return eventstore.StreamAppend{}, false
	}
	// The handoff follows the grant in the same append; decide it on the
	// state the grant leads to.
	next := *x
	next.Apply(grant, uint64(x.Version()+1), time.Time{})
	sched, err := next.Schedule(wk.id, wk.incarnation, p)
	if err != nil {
		return eventstore.StreamAppend{}, false
	}
	if p.Resources != nil {
		sched.ResourceKeyFields = e.resourceKeyFields(p.Resources)
	}
	a := e.stageAfter(fence(), xs, x.Version(), grant, sched)
	e.handing[xs] = handoff{worker: wk.id, version: uint64(x.Version() + 2)}
	wk.take(x.ID())
	return a, true
}
