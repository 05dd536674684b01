// The worker's lease: a worker.heartbeat only to pay a debt of a sign of
// life (domain.Worker.Owe: the worker was handed a run while it owed
// nothing, or holds runs since its last heartbeat), once the debt is
// Config.MarkEvery old; otherwise a read of the worker stream, which is how
// an idle worker learns that it was declared lost or replaced.

package worker

import (
	"context"
	"errors"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/services/repository"
)

func (w *Worker) heartbeats(ctx context.Context) {
	t := time.NewTicker(w.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_ = w.Heartbeat(ctx)
		if w.isSuperseded() {
			return
		}
	}
}

// Heartbeat keeps the lease of the current incarnation. If the incarnation
// owes the log a sign of life (it was handed a run while it owed nothing, or
// holds runs since its last heartbeat) for MarkEvery or longer, it writes
// one worker.heartbeat; otherwise it writes nothing and reads its stream.
// When the log says the incarnation was replaced (the write refused, or the
// stream read), it stops that incarnation's runs and registers a new one.
// Start's loop calls it every Config.Heartbeat; a simulation calls it
// itself. The error is the store's, if the write or the read failed.
func (w *Worker) Heartbeat(ctx context.Context) error {
	now := w.cfg.Clock.Now()
	w.mu.Lock()
	known, inFlight, inc := w.state.Clone(), len(w.running), w.incarnation
	owes := !w.owedSince.IsZero() && now.Sub(w.owedSince) >= w.cfg.MarkEvery
	w.mu.Unlock()
	if !owes {
		return w.look(ctx, inc, known)
	}
	st, err := repository.UpdateWorker(ctx, w.cfg.Store, w.cfg.ID, domain.OwnerWorker, w.cfg.ID, known, func(s *domain.Worker) (domain.Event, error) {
		return s.Heartbeat(inc, inFlight)
	})
	switch {
	case errors.Is(err, domain.ErrWorkerReplaced), errors.Is(err, domain.ErrWorkerNotRegistered):
		w.replaced(ctx, inc)
		return nil
	case err != nil:
		if ctx.Err() == nil {
			w.log.Warn("heartbeat failed", "err", err)
		}
		w.setState(inc, nil)
		return err
	default:
		w.mu.Lock()
		if w.incarnation == inc {
			w.state = st
			// Paid as of now: the debt runs on only for runs held now or
			// handed during the write (their handoffs may follow it in the log).
			w.owedSince = time.Time{}
			if len(w.running) > 0 || !w.handedAt.Before(now) {
				w.owedSince = now
			}
		}
		w.mu.Unlock()
		return nil
	}
}

// owe records that the incarnation inc was handed a run at now: it owes
// the log a sign of life from now on, unless it owed one already.
func (w *Worker) oweLocked(inc string, now time.Time) {
	if w.incarnation != inc {
		return
	}
	w.handedAt = now
	if w.owedSince.IsZero() {
		w.owedSince = now
	}
}

// look reads the worker stream after known, and starts over as a new
// incarnation if inc is no longer the current one there (declared lost, or
// another process registered the id).
func (w *Worker) look(ctx context.Context, inc string, known *domain.Worker) error {
	st, err := repository.CatchUpWorker(ctx, w.cfg.Store, w.cfg.ID, known)
	if err != nil {
		return err
	}
	if st, err = w.pastTrim(ctx, st); err != nil {
		return err
	}
	if st.Incarnation() != inc || (st.Status() != domain.WorkerActive && st.Status() != domain.WorkerDrainingStatus) {
		w.replaced(ctx, inc)
		return nil
	}
	w.setState(inc, st)
	return nil
}

// pastTrim returns st, or, once after each trim of the live log, the
// worker loaded anew (from the newest checkpoint: repository.LoadWorker),
// since the trim may have archived events of the worker stream that st has
// not seen. A worker declared lost while idle learns it here: its stream is
// kept by the trim, but from the live log's start on, so a catch-up from an
// older version reads nothing of the verdict, and the worker would wait for
// ever for work handed to an incarnation the executor has given up on.
func (w *Worker) pastTrim(ctx context.Context, st *domain.Worker) (*domain.Worker, error) {
	t, ok := w.cfg.Store.(eventstore.Trimmer)
	if !ok {
		return st, nil
	}
	start, _, err := t.Start(ctx)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	seen := w.seenStart
	w.mu.Unlock()
	if start == seen {
		return st, nil
	}
	if st, err = repository.LoadWorker(ctx, w.cfg.Store, w.cfg.ID); err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.seenStart = start
	w.mu.Unlock()
	return st, nil
}
