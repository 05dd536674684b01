// The serial fence: without atomic multi-stream appends (KurrentDB before
// 26, clusters; eventstore.AtomicMultiStream false) a worker's execution
// writes cannot carry a condition on its worker stream, so the first write
// of each run is preceded by one of the incarnation's own: a
// worker.heartbeat appended at the worker stream's version as read afresh
// after the handoff, refused if the stream holds a lost verdict (or another
// registration) since. The heartbeat follows the handoff in the log, and
// the run's writes follow the heartbeat. So a lost verdict and the run
// cannot both pass:
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
// of two executors deciding at once that the atomic fence closes elsewhere
// (simulation seed 135). It costs one worker-stream append per run (or per
// batch of runs started together). A heartbeat is a sign of life the
// handoff made the incarnation owe anyway (domain.Worker.Owe).
//
// In-process workers (services/worker, Run.serialFence) and remote
// sessions (services/remote, serialfence.go) both write it with SerialFence.

package repository

import (
	"context"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// SerialFence appends worker id's worker.heartbeat for incarnation inc
// (holding inFlight executions) at the version of the worker stream it
// reads now, afresh, to its end: call it only once the handoffs it fences
// are in the log (delivered to the worker), so that the heartbeat lands
// after them. known, if not nil, is a state of the stream the caller read
// before (it is not changed): only the events after it are read, so a
// fence costs the same however long the stream has grown.
//
// A run whose first write follows a nil error cannot be overtaken by a
// lost verdict its executor did not abandon it under (see the file's
// comment). It returns the worker's state after the heartbeat, or, with a
// refusal, the state that says why: an error wrapping
// domain.ErrWorkerReplaced (declared lost, stopped, or registered anew)
// or domain.ErrWorkerNotRegistered; else the store's error (Unavailable:
// it may have landed, and calling again is safe).
//
// Two calls that read the same version with the same inFlight write the
// same event (its id derives from the version): the second is a replay of
// the first, which landed after both reads, so after the handoffs both
// fence. Otherwise the second lands after the first.
func SerialFence(ctx context.Context, store eventstore.Store, id, inc string, inFlight int, known *domain.Worker) (*domain.Worker, error) {
	// Never append at known's version without this read: a heartbeat there
	// may be a replay of one that landed before the handoff.
	st, err := CatchUpWorker(ctx, store, id, known)
	if err != nil {
		return nil, err
	}
	return UpdateWorker(ctx, store, id, domain.OwnerWorker, id, st, func(w *domain.Worker) (domain.Event, error) {
		return w.Heartbeat(inc, inFlight)
	})
}
