// The follower: the sessions' assignments, cancels and ends, from the log.

package remote

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/internal/backoff"
)

// followTypes are the events the service follows.
var followTypes = []string{
	domain.TypeExecutionScheduled, domain.TypeExecutionCancelRequested,
	domain.TypeExecutionCompleted, domain.TypeExecutionFailed, domain.TypeExecutionTimedOut, domain.TypeExecutionCancelled,
	domain.TypeExecutionRunFailed, // a run failed and will be retried: the assignment ends here too
	domain.TypeExecutionAbandoned, domain.TypeExecutionHandoffExpired,
	domain.TypeWorkerRegistered, domain.TypeWorkerStopped, domain.TypeWorkerLost,
}

// follow subscribes to the log from its head and keeps the sessions'
// assignments, cancels and ends up to date. A subscription that fails (a
// store's failing query, a dropped connection) is opened again from the
// position after the last event it delivered, so nothing is missed; only
// a closed store ends it. A drained session whose last execution ended is
// stopped (worker.stopped) in a goroutine of its own, so that its append
// does not hold up the log; follow returns only once every such goroutine
// has, so Stop never leaves an append behind it (to a store about to close).
func (s *Service) follow(ctx context.Context, started func()) error {
	head, err := s.cfg.Store.Head(ctx)
	if err != nil {
		return err
	}
	var stopping sync.WaitGroup
	defer stopping.Wait()
	started()
	idleDone := make(chan struct{})
	defer func() { <-idleDone }()
	deadlinesDone := make(chan struct{})
	defer func() { <-deadlinesDone }()
	ictx, stopIdle := context.WithCancel(ctx) // ends the idle and deadline loops before they are waited for
	defer stopIdle()
	go func() {
		defer close(idleDone)
		s.expireIdle(ictx)
	}()
	go func() {
		defer close(deadlinesDone)
		s.keepDeadlines(ictx)
	}()
	from := head
	pause := backoff.Backoff{Min: followRetry, Max: followRetryMax, Jitter: backoff.Equal}
	for {
		err = s.cfg.Store.Subscribe(ctx, from, eventstore.Filter{Types: followTypes}, func(batch []domain.Envelope) error {
			var stops []*session
			s.mu.Lock()
			for i := range batch {
				if ss := s.apply(&batch[i]); ss != nil {
					stops = append(stops, ss)
				}
			}
			s.mu.Unlock()
			from = batch[len(batch)-1].Position + 1
			pause.Reset()
			for _, ss := range stops {
				stopping.Go(func() { _ = s.stop(context.WithoutCancel(ctx), ss) })
			}
			return nil
		})
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, eventstore.ErrClosed) {
			return err
		}
		wait := pause.Next()
		s.log.Warn("following the log failed; following again from where it stopped", "position", from, "in", wait, "err", err)
		if !backoff.Sleep(ctx, wait) {
			return nil
		}
	}
}

// followRetry is the first pause before a failed subscription is opened
// again; it doubles after each failure up to followRetryMax.
const followRetry, followRetryMax = 50 * time.Millisecond, 64 * followRetry

// apply folds one followed event into the sessions. It returns a draining
// session whose last execution just ended (to be stopped).
func (s *Service) apply(env *domain.Envelope) *session {
	cat, id := domain.SplitStream(env.Stream)
	if cat == domain.StreamWorker {
		if len(s.byInc) == 0 {
			return nil
		}
		ev, err := codec.Events.Decode(env)
		if err != nil {
			return nil
		}
		for _, ss := range s.byInc {
			if ss.name != id {
				continue
			}
			switch e := ev.(type) {
			case domain.WorkerRegistered:
				if e.Incarnation != ss.inc {
					s.endLocked(ss) // replaced
				}
			case domain.WorkerLost:
				if e.Incarnation == ss.inc {
					s.endLocked(ss)
				}
			case domain.WorkerStopped:
				if e.Incarnation == ss.inc {
					s.endLocked(ss)
				}
			}
		}
		return nil
	}
	switch env.Type {
	case domain.TypeExecutionScheduled:
		if len(s.byInc) == 0 {
			return nil
		}
		ev, err := codec.Events.Decode(env)
		if err != nil {
			return nil
		}
		sched, ok := ev.(domain.ExecutionScheduled)
		if !ok {
			return nil
		}
		ss := s.byInc[sched.Incarnation]
		if ss == nil || ss.ended || ss.name != sched.Worker {
			return nil
		}
		if old := s.byExec[id]; old != nil && old != ss {
			s.forgetLocked(old.assigned[id])
			delete(old.assigned, id)
		}
		// An earlier run of it handed to this incarnation leaves the deadlines.
		s.forgetLocked(ss.assigned[id])
		x := domain.NewExecution(id) // the handoff alone rebuilds the state a report decides on (as an in-process worker's run does)
		x.Apply(sched, env.Version, env.Time)
		ss.assigned[id] = &assignment{x: x, position: env.Position, Assignment: Assignment{Execution: id, Action: sched.Action, Runner: sched.Runner,
			Input: sched.Input, RunnerConfig: sched.RunnerConfig, KeyField: sched.KeyField, Attempt: sched.Attempt, TimeoutSeconds: float64(sched.TimeoutMillis) / 1000,
			Traceparent: sched.Traceparent}}
		if sched.ResourceKeyFields != "" {
			ss.assigned[id].Assignment.ResourceKeyFields = strings.Split(sched.ResourceKeyFields, "\n")
		}
		s.byExec[id] = ss
		ss.oweLocked(time.Now()) // handed work: the incarnation owes the log a sign of life (domain.Worker.Owe)
		s.wakeLocked(ss)
	case domain.TypeExecutionCancelRequested:
		if ss := s.byExec[id]; ss != nil {
			ss.cancels[id] = struct{}{}
			s.wakeLocked(ss)
		}
	default: // the execution ended or was taken back
		ss := s.byExec[id]
		if ss == nil {
			return nil
		}
		delete(s.byExec, id)
		a := ss.assigned[id]
		delete(ss.assigned, id)
		delete(ss.cancels, id)
		s.forgetLocked(a)
		if a != nil && (a.overdue || a.delivered && (env.Type == domain.TypeExecutionAbandoned || env.Type == domain.TypeExecutionHandoffExpired)) {
			ss.cancels[id] = struct{}{} // taken back, or ended past its deadline: the worker must stop its run (its reports are refused)
			s.wakeLocked(ss)
		}
		if ss.draining && len(ss.assigned) == 0 && !ss.ended {
			return ss
		}
	}
	return nil
}
