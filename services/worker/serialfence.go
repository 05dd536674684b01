// The serial fence of an in-process worker's run, on a log without atomic
// multi-stream appends: the run's first write follows a worker.heartbeat of
// its incarnation appended at the worker stream's freshly read version, so
// a lost verdict and the run cannot both pass. The rule and why it holds:
// services/repository, serialfence.go (remote sessions use it too).

package worker

import (
	"context"

	"github.com/turnstile/turnstile/services/repository"
)

// serialFence writes the run's heartbeat before its first write (once per
// run; see repository.SerialFence). An error refuses the run's write: the
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
	inFlight, known := len(w.running), w.state // never changed in place once set
	if w.incarnation != r.inc {
		known = nil
	}
	w.mu.Unlock()
	// The worker stream is read afresh to its end (from the worker's own
	// copy of it on), after the handoff was delivered, so the heartbeat
	// lands after the handoff in the log.
	st, err := repository.SerialFence(ctx, w.cfg.Store, w.cfg.ID, r.inc, inFlight, known)
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
