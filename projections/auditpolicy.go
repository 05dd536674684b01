package projections

import (
	"fmt"
	"time"

	"github.com/turnstile/turnstile/domain"
)

// checkPolicies judges one execution event (before it is applied to x) by
// the rules of the action policies beyond FIFO and limits, on the queues
// as folded up to it: no execution waits in its queue again
// (execution.requeued) before the backoff after its failed run has ended,
// by log time; no handoff's attempt exceeds what the action's policy in
// force allows (max_attempts, or the retry's max_attempts when larger).
// (A deferred execution is in no queue, so a grant of it is refused by
// the grant check: no grant before a backoff ends or before run_at; and
// the grant check judges the order by priority, then request.) It returns "" or what
// is wrong.
func checkPolicies(qs *domain.Queues, x *domain.Execution, ev domain.Event, at time.Time) string {
	switch e := ev.(type) {
	case domain.ExecutionRequeued:
		if until, ok := x.Deferred(); ok && at.Before(until) {
			return fmt.Sprintf("execution %s requeued at %s, before it is due at %s (its backoff or its run_at / delay)", x.ID(),
				at.Format(time.RFC3339Nano), until.Format(time.RFC3339Nano))
		}
	case domain.ExecutionScheduled:
		q := qs.Get(x.Action())
		if q == nil {
			return ""
		}
		if limit := q.Policy().HandoffLimit(); limit > 0 && e.Attempt > limit {
			return fmt.Sprintf("execution %s handed off for attempt %d; action %q allows %d", x.ID(), e.Attempt, x.Action(), limit)
		}
	}
	return ""
}
