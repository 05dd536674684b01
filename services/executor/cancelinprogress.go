// Cancel in progress (on_limit "cancel_in_progress"): while waiters of a
// key value find all its max_concurrent slots taken, the executor asks the
// oldest running executions of that value (by the log time of their grant,
// then id) to cancel, one for each such waiter not yet covered by a
// cancellation already asked. The worker ends the run (cancelled); the
// slot it frees goes to the queue's next waiter as any free slot does.
//
// Writes: execution.cancel_requested (by the executor) on execution-<id>.
// When: timed cycles.

package executor

import (
	"fmt"
	"sort"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// decideCancelInProgress asks the oldest running executions of full key
// values of cancel_in_progress actions to cancel.
func (e *Executor) decideCancelInProgress(ops []op) []op {
	for _, ref := range e.state.Queues.Refs() {
		q := e.state.Queues.Get(ref)
		p := q.Policy()
		if p.OnLimit != domain.OnLimitCancelInProgress || q.Paused() || q.Waiting() == 0 {
			continue
		}
		for _, key := range q.Keys() {
			kq := q.Key(key)
			need := kq.Waiting() - max(p.MaxConcurrent-kq.Active(), 0)
			if need <= 0 {
				continue
			}
			var running []*domain.Execution
			for _, id := range kq.ActiveIDs() {
				x := e.state.Execution(id)
				if x == nil {
					continue
				}
				if x.CancelRequested() {
					need--
					continue
				}
				running = append(running, x)
			}
			sort.SliceStable(running, func(i, j int) bool { return running[i].GrantedAt().Before(running[j].GrantedAt()) })
			for _, x := range running {
				if need <= 0 || len(ops) >= e.cfg.MaxBatch {
					break
				}
				xs := domain.ExecutionStream(x.ID())
				if e.busy(xs) {
					need--
					continue
				}
				ev, err := x.RequestCancelAs(domain.OwnerExecutor,
					fmt.Sprintf("on_limit cancel_in_progress: a newer request of %q key %q takes its slot", ref, key))
				if err != nil {
					continue
				}
				ops = append(ops, op{what: "cancel in progress " + x.ID(), count: &e.Stats.Cancels,
					appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
				need--
			}
		}
	}
	return ops
}
