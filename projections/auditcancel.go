package projections

import (
	"fmt"

	"github.com/turnstile/turnstile/domain"
)

// RuleCancelInProgress: an execution.cancel_requested written by the
// executor on an execution that is not a with_items child is justified only
// by on_limit cancel_in_progress: its action's policy has it and a waiter of
// its key value found every slot of that value taken.
const RuleCancelInProgress = "cancel_in_progress"

// auditCancels judges the executor's cancellations by on_limit
// cancel_in_progress. The executor decides on its fold, which may be a
// little behind the log (a policy change, a waiter's end or cancellation
// may be committed while it decides), and its cancellation is fenced by the
// execution's stream alone; so a cancellation is justified when the rule's
// condition holds at its position, or held at some position since the
// execution's grant (the executor only cancels an execution that holds a
// slot, so its decision was taken at such a position).
type auditCancels struct {
	full    map[string]uint64 // ref + "\x00" + key → the last position at which the condition held
	granted map[string]uint64 // execution → the position of its queue.granted
	before  map[string]bool   // executions granted before an audit's checkpoint: not judged
}

func newAuditCancels() *auditCancels {
	return &auditCancels{full: map[string]uint64{}, granted: map[string]uint64{}, before: map[string]bool{}}
}

// cancelInProgressDue reports whether the condition holds in queue q for
// key: the policy has on_limit cancel_in_progress and the key value has
// more waiters than free slots of its own max_concurrent (as
// services/executor/cancelinprogress.go counts them).
func cancelInProgressDue(q *domain.Queue, key string) bool {
	if q == nil {
		return false
	}
	p := q.Policy()
	kq := q.Key(key)
	return p.OnLimit == domain.OnLimitCancelInProgress && kq != nil && kq.Waiting() > max(p.MaxConcurrent-kq.Active(), 0)
}

// check says what is wrong with cancellation ev of execution id (before it
// is applied to x, after every earlier event was folded into qs), "" if
// nothing.
func (a *auditCancels) check(qs *domain.Queues, env *domain.Envelope, id string, x *domain.Execution, ev domain.Event) string {
	if _, ok := ev.(domain.ExecutionCancelRequested); !ok || env.Owner != domain.OwnerExecutor || x.Parent() != "" || a.before[id] {
		return ""
	}
	ref, key, granted, ok := qs.Locate(id)
	if !ok || !granted {
		return fmt.Sprintf("the executor asked execution %s to cancel, which holds no slot (and is not a with_items child)", id)
	}
	q := qs.Get(ref)
	if cancelInProgressDue(q, key) {
		return ""
	}
	if at, ok := a.full[ref+"\x00"+key]; ok && at >= a.granted[id] {
		return ""
	}
	if q.Policy().OnLimit != domain.OnLimitCancelInProgress {
		return fmt.Sprintf("the executor asked execution %s to cancel; action %q has on_limit %q, not cancel_in_progress", id, ref, q.Policy().OnLimit)
	}
	return fmt.Sprintf("the executor asked execution %s to cancel; no waiter of action %q key %q found every slot of that value taken since its grant", id, ref, key)
}

// track folds one event (already applied to qs): it notes the grant
// positions and, for the key value the event touched, whether the
// condition holds now.
func (a *auditCancels) track(qs *domain.Queues, env *domain.Envelope, ev domain.Event, cat, id string) {
	note := func(ref, key string) {
		if cancelInProgressDue(qs.Get(ref), key) {
			a.full[ref+"\x00"+key] = env.Position
		}
	}
	switch e := ev.(type) {
	case domain.ActionDefined, domain.ActionPolicyChanged:
		_, ref := domain.SplitStream(env.Stream)
		if q := qs.Get(ref); q != nil && q.Policy().OnLimit == domain.OnLimitCancelInProgress {
			for _, key := range q.Keys() {
				note(ref, key)
			}
		}
		return
	case domain.QueueGranted:
		id = e.Execution
		if _, _, granted, ok := qs.Locate(id); ok && granted {
			a.granted[id] = env.Position
		}
	default:
		if cat != domain.StreamExecution {
			return
		}
	}
	if ref, key, _, ok := qs.Locate(id); ok {
		note(ref, key)
	}
	if _, _, _, ok := qs.Locate(id); !ok {
		delete(a.granted, id)
	}
}
