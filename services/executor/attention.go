// Executions the executor holds outside the queue: one asked to cancel
// before its handoff is cancelled; one taken back from a worker (its
// handoff expired, or it was abandoned) is handed to another worker if one
// is free, or failed once its max_attempts are spent; one whose run failed
// and may run again backs off (retry.go).
//
// Writes: execution.cancelled, execution.scheduled (the handoff again),
// execution.retry_scheduled or execution.failed on execution-<id>, at its
// version. When: every cycle.

package executor

import (
	"fmt"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// decideAttention handles plain executions the executor owns outside the
// queue: pre-handoff cancellation requests, and executions taken back from a
// worker (hand them to another worker, or fail them when attempts are exhausted).
func (e *Executor) decideAttention(ops []op, attention []string) []op {
	workers := e.freeWorkers()
	for _, id := range attention {
		if len(ops) >= e.cfg.MaxBatch {
			break
		}
		x := e.state.Execution(id)
		xs := domain.ExecutionStream(id)
		if x == nil || e.busy(xs) || x.IsParent() {
			continue
		}
		if x.CancelRequested() {
			if ev, err := x.Cancel(domain.OwnerExecutor, e.cfg.Name, x.CancelReason()); err == nil {
				ev.Code = domain.CancelRequested
				ops = append(ops, op{what: "cancel " + id, count: &e.Stats.Cancels,
					appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
			}
			continue
		}
		if x.Status() != domain.StatusScheduling {
			continue
		}
		q := e.state.Queues.Get(x.Action())
		if q == nil {
			continue
		}
		p := q.Policy()
		if x.TakenBack() == domain.TakenBackRunFailed {
			ops = e.decideRetry(ops, x, xs, p)
			continue
		}
		if limit := p.HandoffLimit(); limit > 0 && x.Attempt() >= limit { // (max_attempts, or the retry's when larger)
			code := x.TakenBack()
			why := "no worker started it within its scheduled_timeout"
			if code == domain.FailWorkerLost {
				why = "its worker was lost or stopped while holding it"
			}
			ev, err := x.Fail(domain.OwnerExecutor, e.cfg.Name,
				fmt.Sprintf("%s: gave up after %d attempts (max_attempts %d): %s", code, x.Attempt(), p.HandoffLimit(), why), nil)
			if err == nil {
				ev.Code = code
				ops = append(ops, op{what: "fail " + id, count: &e.Stats.Failures,
					appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
			}
			continue
		}
		// Another worker than the one it was taken back from, if one is free.
		wk := pickWorkerBut(workers, p.Runner, id, x.Worker())
		if wk == nil {
			wk = pickWorker(workers, p.Runner, id)
		}
		if wk == nil {
			continue
		}
		ev, err := x.Schedule(wk.id, wk.incarnation, p)
		if err != nil {
			continue
		}
		wk.take(id)
		ops = append(ops, op{what: "reschedule " + id, count: &e.Stats.Grants, grants: true,
			appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
		e.handing[xs] = handoff{worker: wk.id, version: uint64(x.Version() + 1)}
	}
	return ops
}
