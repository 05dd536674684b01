// Polls: a session's assignments and cancels, answered at once or after a wait.

package remote

import (
	"context"
	"sort"
	"time"
)

// MaxWait bounds a poll's wait.
const MaxWait = 60 * time.Second

// Poll renews the lease and returns the session's assignments (at most
// limit; a negative limit is the incarnation's slots, 0 none) and cancels:
// at once if there is something it has not returned yet, else once there
// is, or after wait. Assignments it returned before that were not reported
// on come again (a worker deduplicates by execution and attempt).
//
// Only the poll's arrival renews the lease (it pays the incarnation's debt
// of a sign of life, if it owes one: see Config.Lease), and its wait is cut
// to half the lease: an open poll is no sign of life (a worker frozen by
// SIGSTOP, or cut off with no reset, keeps its poll open), so such a worker
// that owes one is declared lost one lease after its debt began, whatever
// wait it asked for. A live worker polls again when the answer comes. The
// wait is cut to half of Config.IdleTimeout too, so a polling worker's
// session is never idle for it.
func (s *Service) Poll(ctx context.Context, x Session, limit int, wait time.Duration) (PollResult, error) {
	ss := x.s
	if err := s.renew(ctx, ss); err != nil {
		return PollResult{}, err
	}
	if limit < 0 {
		limit = ss.slots
	}
	wait = min(max(wait, 0), MaxWait, s.cfg.Lease/2, s.cfg.IdleTimeout/2)
	t := time.NewTimer(wait)
	defer t.Stop()
	expired := false
	for {
		s.mu.Lock()
		if ss.ended {
			s.mu.Unlock()
			return PollResult{}, ErrEnded
		}
		fresh := len(ss.cancels) > 0
		for _, a := range ss.assigned {
			if limit > 0 && !a.delivered && !a.reported {
				fresh = true
				break
			}
		}
		if fresh || expired || wait == 0 {
			out := s.takeLocked(ss, limit)
			s.mu.Unlock()
			return out, nil
		}
		wake := ss.wake
		s.mu.Unlock()
		select {
		case <-wake:
		case <-t.C:
			expired = true
		case <-ctx.Done():
			return PollResult{}, ctx.Err()
		}
	}
}

// takeLocked returns up to max assignments not reported on (those never
// returned first, each group in log order) and the pending cancels.
func (s *Service) takeLocked(ss *session, limit int) PollResult {
	out := PollResult{Assignments: []Assignment{}, Cancels: []string{}}
	var as []*assignment
	for _, a := range ss.assigned {
		if !a.reported && (a.started.IsZero() || time.Since(a.started) >= offerStartedAgain) {
			as = append(as, a)
		}
	}
	sort.Slice(as, func(i, j int) bool {
		if as[i].delivered != as[j].delivered {
			return !as[i].delivered
		}
		return as[i].position < as[j].position
	})
	for _, a := range as {
		if len(out.Assignments) >= limit {
			break
		}
		a.delivered = true
		out.Assignments = append(out.Assignments, a.Assignment)
	}
	for id := range ss.cancels {
		out.Cancels = append(out.Cancels, id)
	}
	sort.Strings(out.Cancels)
	clear(ss.cancels)
	return out
}
