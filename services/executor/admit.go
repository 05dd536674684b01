// Admission: a request its action's queue refused (unknown action, queue
// full, no slot, invalid input, rate limited) is rejected. The queue's
// fold decides the refusal, the executor writes it.
//
// Writes: execution.rejected on execution-<id>, at the execution's
// version. When: every cycle.

package executor

import (
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

func (e *Executor) decideRejections(ops []op) []op {
	for _, r := range e.state.Queues.PendingRejections() {
		if len(ops) >= e.cfg.MaxBatch {
			break
		}
		x := e.state.Execution(r.Execution)
		stream := domain.ExecutionStream(r.Execution)
		if x == nil || e.busy(stream) {
			continue
		}
		ev, err := x.Reject(r.Code, r.Reason)
		if err != nil {
			continue
		}
		ops = append(ops, op{what: "reject " + r.Execution, count: &e.Stats.Rejections,
			appends: []eventstore.StreamAppend{e.stage(stream, x.Version(), ev)}})
	}
	return ops
}
