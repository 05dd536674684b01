// Idle sessions: a session that holds no execution and whose worker has
// made no request for Config.IdleTimeout ends, and its incarnation is
// recorded stopped, so that a worker that went away while idle (its lease
// never runs: it owes the log nothing) neither stays listed as active nor
// keeps its name counted against its token's bound for ever.

package remote

import (
	"context"
	"errors"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/repository"
)

// expireIdle ends idle sessions until ctx ends, looking every quarter of
// IdleTimeout.
func (s *Service) expireIdle(ctx context.Context) {
	t := time.NewTicker(max(s.cfg.IdleTimeout/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		var idle []*session
		now := time.Now()
		for _, ss := range s.byInc {
			if s.idleLocked(ss, now) {
				idle = append(idle, ss)
			}
		}
		s.mu.Unlock()
		for _, ss := range idle {
			s.expire(ctx, ss)
		}
	}
}

// idleLocked reports whether ss holds nothing and its worker has been
// silent for IdleTimeout at now.
func (s *Service) idleLocked(ss *session, now time.Time) bool {
	return !ss.ended && len(ss.assigned) == 0 && now.Sub(ss.lastCall) >= s.cfg.IdleTimeout
}

// expire records worker.stopped for ss if it is still idle, and ends it.
func (s *Service) expire(ctx context.Context, ss *session) {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	s.mu.Lock()
	known, idle := ss.state.Clone(), s.idleLocked(ss, time.Now())
	s.mu.Unlock()
	if !idle {
		return
	}
	_, err := repository.UpdateWorker(ctx, s.cfg.Store, ss.name, domain.OwnerWorker, ss.name, known, func(w *domain.Worker) (domain.Event, error) {
		return w.Stop(ss.inc)
	})
	if err != nil && !errors.Is(err, domain.ErrWorkerReplaced) && !errors.Is(err, domain.ErrWorkerNotRegistered) {
		if ctx.Err() == nil {
			s.log.Warn("cannot record worker.stopped for an idle remote worker", "worker", ss.name, "incarnation", ss.inc, "err", err)
		}
		return
	}
	s.mu.Lock()
	s.endLocked(ss)
	s.mu.Unlock()
	s.log.Info("remote worker idle and silent: stopped", "worker", ss.name, "incarnation", ss.inc, "idle_timeout", s.cfg.IdleTimeout)
}
