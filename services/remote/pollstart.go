// Polls that start what they hand: a worker that runs an assignment as soon
// as it has it asks the poll to record the runs' start, so that it sends no
// running report of its own (one round trip and one commit less per run).

package remote

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/turnstile/turnstile/services/repository"
)

// PollStart is Poll for a worker that runs what it is handed at once: each
// assignment it returns is recorded running first, on the session's behalf
// and fenced exactly as the session's running report would be. An
// assignment the log refuses (taken back meanwhile) is left out; one whose
// start could not be written now is left out too and offered again by a
// later poll. An assignment started so is returned again by later polls
// until the worker reports on it (its end), from offerStartedAgain after
// its start on, so a lost answer costs a wait, not the run: the worker
// deduplicates.
func (s *Service) PollStart(ctx context.Context, x Session, limit int, wait time.Duration) (PollResult, error) {
	out, err := s.Poll(ctx, x, limit, wait)
	if err != nil || len(out.Assignments) == 0 {
		return out, err
	}
	errs := make([]error, len(out.Assignments))
	if !s.fenced { // one serial fence for the batch: each start then writes without its own
		if err := s.fenceBatch(ctx, x.s, out.Assignments); err != nil {
			for i := range errs {
				errs[i] = err
			}
		}
	}
	var wg sync.WaitGroup
	for i, a := range out.Assignments { // at once, so that their appends share a group commit
		if errs[i] != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Report(ctx, x, Report{Execution: a.Execution, Attempt: a.Attempt, Status: ReportRunning})
		}()
	}
	wg.Wait()
	kept := out.Assignments[:0]
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, a := range out.Assignments {
		as := x.s.assigned[a.Execution]
		switch err := errs[i]; {
		case err == nil:
			kept = append(kept, a)
			if as != nil { // started, not reported on by the worker: offered again until it is (after a while)
				as.reported, as.started = false, time.Now()
			}
		case errors.Is(err, ErrEnded):
			return PollResult{}, ErrEnded
		case errors.Is(err, ErrUnavailable), repository.Unavailable(err), ctx.Err() != nil:
			if as != nil {
				as.delivered = false // offered again
			}
		}
	}
	out.Assignments = kept
	return out, nil
}

// offerStartedAgain is how long after a start poll recorded an assignment
// running later polls leave it out (the worker has it, unless the answer
// was lost): a run that ends sooner is never sent twice.
const offerStartedAgain = 2 * time.Second

// fenceBatch writes one serial fence (serialfence.go) for the runs of the
// assignments a poll hands: their handoffs are in the log, so the
// heartbeat, read afresh, follows them all. An error refuses every start
// of the batch (each is then left out or offered again, as a refused
// report's would be).
func (s *Service) fenceBatch(ctx context.Context, ss *session, handed []Assignment) error {
	s.mu.Lock()
	as := make([]*assignment, 0, len(handed))
	for _, h := range handed {
		if a := ss.assigned[h.Execution]; a != nil && a.Attempt == h.Attempt {
			as = append(as, a)
		}
	}
	s.mu.Unlock()
	return s.fence(ctx, ss, as...)
}
