// Expiry and take-back: a handoff no worker started within its
// scheduled_timeout expires; an execution held by a replaced incarnation,
// or by a stopped or lost worker, and a handoff a draining worker has not
// started, are abandoned. Either way the executor takes the execution back,
// fenced by its version against the worker's own writes, and attention.go
// decides what comes next.
//
// Writes: execution.handoff_expired or execution.abandoned on
// execution-<id>. When: expiries, and what active workers hold, on timed
// cycles; what draining, stopped and lost workers hold, every cycle.

package executor

import (
	"fmt"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/projections"
)

// decideExpiries takes back handoffs that no worker started in time (on a
// timed cycle), executions held by an incarnation that is no longer the
// worker's current one or by a stopped or lost worker, and handoffs to a
// draining worker that it has not started (it takes nothing new).
func (e *Executor) decideExpiries(ops []op, now time.Time, timed bool) []op {
	skip := func(w *projections.WorkerState) bool {
		return len(w.InFlight) == 0 || (!timed && w.Status() == domain.WorkerActive) // an active worker's replaced incarnations are found on the next tick
	}
	found := false
	for _, w := range e.state.Workers { // (no sorted list of every worker per cycle when none holds anything to check)
		if !skip(w) {
			found = true
			break
		}
	}
	if !found {
		return ops
	}
	for _, wid := range e.state.WorkerIDs() {
		w := e.state.Workers[wid]
		if skip(w) {
			continue
		}
		for _, id := range e.state.HeldBy(wid) {
			if len(ops) >= e.cfg.MaxBatch {
				return ops
			}
			x := e.state.Execution(id)
			xs := domain.ExecutionStream(id)
			if x == nil || e.busy(xs) {
				continue
			}
			var reason string
			switch {
			case w.Status() == domain.WorkerLostStatus || w.Status() == domain.WorkerStoppedStatus:
				reason = fmt.Sprintf("worker %s incarnation %s is %s", wid, x.Incarnation(), w.Status())
			case x.Incarnation() != "" && x.Incarnation() != w.Incarnation():
				reason = fmt.Sprintf("worker %s incarnation %s was replaced by %s", wid, x.Incarnation(), w.Incarnation())
			case w.Status() == domain.WorkerDrainingStatus && x.Status() == domain.StatusScheduled:
				reason = fmt.Sprintf("worker %s is draining and had not started it", wid)
			}
			if reason != "" {
				if ev, err := x.Abandon(reason); err == nil {
					ops = append(ops, op{what: "abandon " + id, count: &e.Stats.Abandons, takeBack: true,
						appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
				}
				continue
			}
			if timed && x.Status() == domain.StatusScheduled {
				if ev, err := x.ExpireHandoff(now); err == nil {
					ops = append(ops, op{what: "expire " + id, count: &e.Stats.Expiries, takeBack: true,
						appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
				}
			}
		}
	}
	return ops
}
