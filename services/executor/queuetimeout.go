// Queue timeouts: a waiter that has waited in its action's queue longer
// than the policy's queue_timeout (the executor's clock against the
// request's log time) is cancelled.
//
// Writes: execution.cancelled (code queue_timeout) on execution-<id>.
// When: timed cycles.

package executor

import (
	"fmt"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// decideQueueTimeouts cancels waiters that waited longer than their queue timeout.
func (e *Executor) decideQueueTimeouts(ops []op, now time.Time) []op {
	for _, ref := range e.state.Queues.Refs() {
		q := e.state.Queues.Get(ref)
		for _, w := range q.TimedOut(now, e.cfg.MaxBatch) {
			if len(ops) >= e.cfg.MaxBatch {
				return ops
			}
			x := e.state.Execution(w.Execution)
			xs := domain.ExecutionStream(w.Execution)
			if x == nil || e.busy(xs) {
				continue
			}
			ev, err := x.Cancel(domain.OwnerExecutor, e.cfg.Name,
				fmt.Sprintf("%s: waited more than %s in the queue of %q", domain.CancelQueueTimeout, q.Policy().QueueTimeout(), ref))
			if err == nil {
				ev.Code = domain.CancelQueueTimeout
				ops = append(ops, op{what: "queue timeout " + w.Execution, count: &e.Stats.Cancels,
					appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
			}
		}
	}
	return ops
}
