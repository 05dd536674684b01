// Lost workers: a worker that owes the log a sign of life (it holds
// executions, or was handed one since its last event on its stream:
// domain.Worker.Owe) and has written none for Config.WorkerLease, judged by
// this executor's clock against the log time the debt began, or, with
// Config.LoseWorkersAtStart, every active worker of the previous run, is
// declared lost together with the abandonment of every execution
// it holds, so that after the verdict no write of the lost incarnation
// passes the handoff rule.
//
// Writes: worker.lost on worker-<id> (fenced by its version against the
// worker's heartbeats) and execution.abandoned on each execution it holds.
// When: leases on timed cycles; at start once the fold has caught up.

package executor

import (
	"fmt"
	"strconv"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// maxAbandonsWithVerdict bounds the abandonments written in the same append
// as a lost-worker verdict; the rest follow in decideExpiries.
const maxAbandonsWithVerdict = 4096

// loseWorker decides worker id's lost verdict and, in the same atomic append,
// the abandonment of every execution it holds: from the verdict's position
// on, no write of the lost incarnation for those executions can pass the
// handoff rule. If one of them moved meanwhile (the worker was alive after
// all), the whole append fails and the next cycle decides again.
func (e *Executor) loseWorker(ops []op, id string, now time.Time, lease time.Duration, force bool, reason string) []op {
	w := e.state.Workers[id]
	ws := domain.WorkerStream(id)
	if w == nil || (w.Status() != domain.WorkerActive && w.Status() != domain.WorkerDrainingStatus) || e.busy(ws) {
		return ops
	}
	verdict, err := w.DeclareLost(now, lease, force, reason)
	if err != nil {
		return ops
	}
	for xs, h := range e.handing {
		if h.worker != id {
			continue
		}
		if _, xid := domain.SplitStream(xs); !e.state.IsLive(xid) {
			delete(e.handing, xs) // it has ended since: the handoff cannot land any more
			continue
		}
		return ops // decide once the fold shows whether our handoff to it landed
	}
	held := e.state.HeldBy(id)
	if len(held) > maxAbandonsWithVerdict {
		held = held[:maxAbandonsWithVerdict]
	}
	for _, xid := range held {
		if e.busy(domain.ExecutionStream(xid)) {
			return ops // decide once our own write to it is folded
		}
	}
	va := e.stage(ws, w.Version(), verdict)
	o := op{what: "lose worker " + id, count: &e.Stats.LostWorkers, takeBack: true, seq: seqChain, appends: []eventstore.StreamAppend{va}}
	for _, xid := range held {
		x := e.state.Execution(xid)
		if x == nil {
			continue
		}
		ev, err := x.Abandon(fmt.Sprintf("worker %s incarnation %s was declared lost: %s", id, x.Incarnation(), reason))
		if err != nil {
			continue
		}
		// The id derives from the verdict's and the execution's version: on
		// the single-stream path an abandonment may land while its verdict
		// does not, and the execution be handed to the worker again; the
		// next verdict (the same id: the worker stream has not moved) must
		// give that new handoff's abandonment an id of its own.
		fence := domain.DeriveID(va.Events[0].ID, strconv.AppendInt(nil, x.Version(), 10))
		o.appends = append(o.appends, e.stageAfter(fence, domain.ExecutionStream(xid), x.Version(), ev))
	}
	if e.single && len(o.appends) > 1 {
		// One stream at a time: every abandonment first, each fenced by its
		// execution's version against the worker's own writes, then the
		// verdict, fenced by the worker stream's version against its
		// heartbeats. If the worker wrote to one of them meanwhile, it is
		// alive: the chain stops before the verdict (the abandonments that
		// landed stand, like handoff expiries). Once the verdict lands,
		// every execution it held is already taken back, so no write of the
		// lost incarnation can pass the handoff rule after it.
		o.appends = append(o.appends[1:], va)
		o.key = len(o.appends) - 1
	}
	return append(ops, o)
}

// decideLeases declares lost the workers that owe the log a sign of life
// since a lease or more before now. An idle worker owes none: its lease
// does not run, however quiet the log.
func (e *Executor) decideLeases(ops []op, now time.Time) []op {
	var reason string
	for _, id := range e.state.WorkerIDs() {
		if len(ops) >= e.cfg.MaxBatch {
			break
		}
		if !e.state.Workers[id].LeaseLapsed(now, e.cfg.WorkerLease) {
			continue // owes nothing, or not for a lease yet (loseWorker would refuse it, at the cost of an error's text)
		}
		if reason == "" {
			reason = fmt.Sprintf("no sign of life in the log for %s while it held or was handed work (its lease)", e.cfg.WorkerLease)
		}
		ops = e.loseWorker(ops, id, now, e.cfg.WorkerLease, false, reason)
	}
	return ops
}

// decideLostAtStart declares every active worker lost, right after the fold
// caught up, when the configuration says they all died with the last run.
func (e *Executor) decideLostAtStart(ops []op) []op {
	if !e.cfg.LoseWorkersAtStart {
		return ops
	}
	for _, id := range e.state.WorkerIDs() {
		ops = e.loseWorker(ops, id, e.cfg.Clock.Now(), 0, true, "its process ended with the previous run")
	}
	return ops
}
