// The serial fence of a session's runs, on a log without atomic
// multi-stream appends (KurrentDB before 26, clusters): the first write of
// each run handed to the session, whether its running report, a terminal
// report that records the start first, or the start a poll records
// (pollstart.go), follows a worker.heartbeat of the session's incarnation
// appended at the worker stream's version read afresh, so a lost verdict
// and the run cannot both pass. The rule and why it holds:
// services/repository, serialfence.go (in-process workers use it too).

package remote

import (
	"context"
	"fmt"
	"time"

	"github.com/turnstile/turnstile/services/repository"
)

// fenceRun fences the first write of the run of execution id at attempt
// (the handoff the report's decision holds, which is in the log): nothing
// if a heartbeat fenced that run already, else one (fence). An assignment
// the session does not hold at that attempt is not marked, so each of its
// writes is fenced.
func (s *Service) fenceRun(ctx context.Context, ss *session, id string, attempt int) error {
	s.mu.Lock()
	a := ss.assigned[id]
	if a != nil && a.Attempt != attempt {
		a = nil
	}
	done := a != nil && a.fenced
	s.mu.Unlock()
	if done {
		return nil
	}
	if err := s.fence(ctx, ss, a); err != nil {
		return fmt.Errorf("fence the run of %s: %w", id, err)
	}
	return nil
}

// fence appends ss's heartbeat at the worker stream's freshly read version
// (repository.SerialFence) and marks the assignments as fenced: their
// handoffs are in the log before that read, so their runs' writes may
// follow. A refusal wraps domain.ErrWorkerReplaced or
// domain.ErrWorkerNotRegistered (409: the incarnation was declared lost or
// replaced; the run must write nothing), or is the store's error
// (repository.Unavailable: try again). The heartbeat pays the incarnation's
// debt of a sign of life, as renew's does.
func (s *Service) fence(ctx context.Context, ss *session, as ...*assignment) error {
	now := time.Now()
	s.mu.Lock()
	inFlight, known := len(ss.assigned), ss.state // never changed in place once set
	s.mu.Unlock()
	st, err := repository.SerialFence(ctx, s.cfg.Store, ss.name, ss.inc, inFlight, known)
	s.mu.Lock()
	defer s.mu.Unlock()
	if st != nil && (ss.state == nil || ss.state.Version() < st.Version()) {
		ss.state = st // the log's state (after a refusal it says why)
	}
	if err != nil {
		return err
	}
	ss.owedSince = time.Time{}
	if len(ss.assigned) > 0 || !ss.handedAt.Before(now) {
		ss.owedSince = now // it holds work (or was handed some during the write): the debt runs on from here
	}
	for _, a := range as {
		if a != nil {
			a.fenced = true
		}
	}
	return nil
}
