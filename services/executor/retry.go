// Retries: a run whose worker wrote execution.run_failed is taken back
// with execution.retry_scheduled (its slot released, a backoff from the
// policy in force), or ended with execution.failed when the policy allows
// no further run any more; once its backoff has ended by the executor's
// clock (judged a margin late, so the commit's log time is never before
// it), execution.requeued puts it back in its queue, behind every waiter
// there.
//
// Writes: execution.retry_scheduled, execution.failed, execution.requeued
// on execution-<id>, at its version. When: retry_scheduled every cycle,
// requeued on timed cycles.

package executor

import (
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// decideRetry takes back x, whose run failed, under policy p.
func (e *Executor) decideRetry(ops []op, x *domain.Execution, xs string, p domain.Policy) []op {
	id := x.ID()
	if ev, err := x.ScheduleRetry(p); err == nil {
		return append(ops, op{what: "retry " + id, count: &e.Stats.Retries,
			appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
	}
	if ev, err := x.FailRun(); err == nil {
		return append(ops, op{what: "fail " + id, count: &e.Stats.Failures,
			appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
	}
	return ops
}

// decideRequeues puts in their queues the executions whose backoff, or
// whose request's run_at / delay, ended by now (less rateMargin).
func (e *Executor) decideRequeues(ops []op, now time.Time) []op {
	if len(e.state.Deferred) == 0 {
		return ops
	}
	judged := now.Add(-rateMargin)
	for _, id := range sortedKeys(e.state.Deferred) {
		if len(ops) >= e.cfg.MaxBatch {
			break
		}
		if e.state.Deferred[id].After(judged) {
			continue
		}
		x := e.state.Execution(id)
		xs := domain.ExecutionStream(id)
		if x == nil || e.busy(xs) {
			continue
		}
		key := x.ConcurrencyKey() // after a failed run; a request not due yet has its key from its input
		if x.Attempt() == 0 {
			q := e.state.Queues.Get(x.Action())
			if q == nil {
				continue
			}
			k, err := q.Policy().KeyOf(x.Input())
			if err != nil {
				continue // (admitted with another policy in force: the key the request gave then is gone)
			}
			key = k
		}
		ev, err := x.Requeue(judged, key)
		if err != nil {
			continue
		}
		ops = append(ops, op{what: "requeue " + id, count: &e.Stats.Requeues,
			appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
	}
	return ops
}
