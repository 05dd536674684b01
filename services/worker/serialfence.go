// The serial fence: without atomic multi-stream appends (KurrentDB) a run's
// writes cannot carry a condition on the worker stream (Run.guard), so the
// run's first write is preceded by one of the incarnation's own: a
// worker.heartbeat appended at the worker stream's version, refused if the
// stream holds a lost verdict (or another registration) since. The
// heartbeat follows the handoff in the log, and the run's writes follow the
// heartbeat. So a lost verdict and the run cannot both pass:
//
//   - a verdict that lands before the heartbeat refuses it (the
//     incarnation is no longer current), and the run writes nothing;
//   - a verdict decided on a fold without the heartbeat expects the worker
//     stream's version before it, and is refused once the heartbeat lands;
//   - a verdict decided on a fold with the heartbeat has the handoff in its
//     fold too: it abandons the execution first, fenced by the execution's
//     version against the run's own writes (services/executor, loseWorker).
//
// This closes, on such a log, the race between a handoff and a lost verdict
// of two executors deciding at once that the atomic fence closes elsewhere.
// It costs one worker-stream append per run. A heartbeat is a sign of life
// the handoff made the incarnation owe anyway (domain.Worker.Owe).

package worker

import (
	"context"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/repository"
)

// serialFence writes the run's heartbeat before its first write (once per
// run; see the file's comment). An error refuses the run's write: the
// store's (repository.Unavailable: try again), or domain.ErrWorkerReplaced
// when the worker stream says the run's incarnation was declared lost or
// replaced.
func (r *Run) serialFence(ctx context.Context) error {
	if r.marked {
		return nil
	}
	w := r.w
	now := w.cfg.Clock.Now()
	w.mu.Lock()
	inFlight := len(w.running)
	w.mu.Unlock()
	// The worker stream is read afresh (not the worker's own copy of it),
	// after the handoff was delivered, so the heartbeat lands after the
	// handoff in the log. Two runs that read the same version write the same
	// heartbeat (its id derives from the version): the second is a replay
	// of the first, which landed after both reads, so after both handoffs.
	st, err := repository.UpdateWorker(ctx, w.cfg.Store, w.cfg.ID, domain.OwnerWorker, w.cfg.ID, nil, func(s *domain.Worker) (domain.Event, error) {
		return s.Heartbeat(r.inc, inFlight)
	})
	if err != nil {
		if st != nil && !repository.Unavailable(err) {
			w.setState(r.inc, st) // the log's state: it says why
		}
		return err
	}
	w.mu.Lock()
	if w.incarnation == r.inc {
		w.state = st
		w.owedSince = now // paid as of now; it holds this run: the debt runs on from here
	}
	w.mu.Unlock()
	r.marked = true
	return nil
}
