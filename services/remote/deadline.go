// Deadlines of remote runs: a run a remote worker started and has not
// reported the end of within its action's timeout (plus DeadlineGrace) is
// ended timed_out by the service, on the worker's behalf, and the worker is
// told to stop it through its next poll's cancels.
//
// Who writes it, and why it keeps the handoff rule: after the handoff the
// execution's events are the worker's (domain/rule.go: timed_out is written
// by the worker named in the handoff, from running), and this service
// writes a remote worker's events on its behalf. An in-process worker's
// runs end timed_out by their own deadline (services/worker: the runner's
// ctx); a remote worker's deadline is kept here, by the same writer that
// writes the rest of its events, with the same fences as its reports: at
// the execution's expected version, only while the handoff it acts under is
// the incarnation's (domain.Execution.Holds) and only while the incarnation
// lives (guard). So the rule table and the audit are unchanged: the event is
// the one a worker that kept its own deadline would have written. A report
// that races it is decided by the log (both append at the execution's
// version; the loser is refused: 409, nothing written).

package remote

import (
	"container/heap"
	"context"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/repository"
)

// DeadlineGrace is how long past its action's timeout a remote run may go
// unreported before the server ends it timed_out: a tenth of the timeout,
// at least 2s and at most a minute. A worker that keeps the deadline
// itself (the Go worker package does) reports first, with its own result.
func DeadlineGrace(timeout time.Duration) time.Duration {
	return min(max(timeout/10, 2*time.Second), time.Minute)
}

// deadlineTick is how often the service looks for overdue runs.
const deadlineTick = 100 * time.Millisecond

// deadlines is a min-heap of the started runs' assignments by due; each
// keeps its index in it (dueAt), so that a run that ends leaves it at once.
type deadlines []*assignment

func (h deadlines) Len() int           { return len(h) }
func (h deadlines) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h deadlines) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].dueAt, h[j].dueAt = i, j
}
func (h *deadlines) Push(x any) {
	a := x.(*assignment)
	a.dueAt = len(*h)
	*h = append(*h, a)
}
func (h *deadlines) Pop() any {
	old := *h
	a := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	a.dueAt = -1
	return a
}

// startedLocked records that a's run started now (its running event is in
// the log) and sets its deadline; a run with a deadline keeps it.
func (s *Service) startedLocked(ss *session, a *assignment, now time.Time) {
	if !a.runningSince.IsZero() || a.TimeoutSeconds <= 0 {
		return
	}
	a.runningSince, a.ss = now, ss
	timeout := a.timeout()
	a.due = now.Add(timeout + DeadlineGrace(timeout))
	heap.Push(&s.due, a)
}

// forgetLocked takes a (which its session no longer holds) out of the deadlines.
func (s *Service) forgetLocked(a *assignment) {
	if a != nil && a.dueAt >= 0 && a.dueAt < len(s.due) && s.due[a.dueAt] == a {
		heap.Remove(&s.due, a.dueAt)
	}
}

func (a *assignment) timeout() time.Duration {
	return time.Duration(a.TimeoutSeconds * float64(time.Second))
}

// keepDeadlines ends overdue runs until ctx ends.
func (s *Service) keepDeadlines(ctx context.Context) {
	t := time.NewTicker(deadlineTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		s.mu.Lock()
		var overdue []*assignment
		for len(s.due) > 0 && !s.due[0].due.After(now) {
			overdue = append(overdue, heap.Pop(&s.due).(*assignment))
		}
		s.mu.Unlock()
		for _, a := range overdue {
			s.timeOut(ctx, a)
		}
	}
}

// timeOut ends a's run timed_out on its worker's behalf, if the session
// still holds it and it has not ended: x.RetryOr decides between timed_out
// and run_failed (another run by the action's retry policy), as for a
// worker's own timed_out report. The run's id goes to the worker's next
// poll's cancels (apply). A refusal (the run ended or was taken back
// meanwhile, the incarnation is lost) writes nothing; a log that cannot be
// written now is tried again a tick later.
func (s *Service) timeOut(ctx context.Context, a *assignment) {
	ss, id, attempt := a.ss, a.Execution, a.Attempt
	s.mu.Lock()
	if ss.ended || ss.assigned[id] != a {
		s.mu.Unlock()
		return
	}
	a.overdue = true
	known := a.x // lent, as to a report
	a.x = nil
	timeout := a.timeout()
	s.mu.Unlock()
	held := attempt
	xs, err := repository.UpdateExecutionGuarded(ctx, s.cfg.Store, id, domain.OwnerWorker, ss.name, known, s.guard(ss, id, &held),
		func(x *domain.Execution) (domain.Event, error) {
			if err := x.Holds(ss.name, ss.inc, attempt); err != nil {
				return nil, err
			}
			ev, err := x.TimeOut(ss.name, timeout)
			return x.RetryOr(ev, err)
		})
	s.mu.Lock()
	defer s.mu.Unlock()
	held0 := ss.assigned[id] == a
	switch {
	case err == nil:
		if held0 {
			a.x = xs
		}
		s.log.Warn("remote run past its deadline: ended on the worker's behalf; its worker is told to stop it",
			"execution", id, "attempt", attempt, "worker", ss.name, "incarnation", ss.inc, "timeout", timeout, "grace", DeadlineGrace(timeout), "status", xs.Status())
	case repository.Unavailable(err) && ctx.Err() == nil:
		if held0 {
			a.overdue = false
			a.due = time.Now().Add(deadlineTick)
			heap.Push(&s.due, a)
		}
		s.log.Warn("cannot end an overdue remote run now; trying again", "execution", id, "err", err)
	default: // refused: it ended or was taken back meanwhile, or the incarnation is gone
		if held0 {
			a.overdue = false
		}
	}
}
