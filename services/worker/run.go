// A run: one handoff taken by this worker, from its start (Begin: the
// execution.running write, fenced by the worker's own stream) through its
// runner to its end (End: completed, failed, timed_out, cancelled, or
// run_failed when the retry policy allows another run), every write guarded
// so that a lost or replaced incarnation can write nothing.

package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/services/crashpoint"
	"github.com/turnstile/turnstile/services/repository"
	"github.com/turnstile/turnstile/services/runner"
)

// Run is one handoff the worker took: an attempt of an execution. When the
// worker was started with Start, its own goroutine drives each Run; a
// simulation drives it step by step: Begin, the work, End, then Close.
type Run struct {
	w      *Worker
	key    runKey
	x      *domain.Execution // the state the next write decides on
	sched  domain.ExecutionScheduled
	inc    string // the worker's incarnation when it took the handoff
	ctx    context.Context
	cancel context.CancelCauseFunc
	close  sync.Once
	marked bool // without atomic multi-stream appends: its heartbeat is in the log (serialfence.go)
}

// AcceptHandoff takes a handoff (the execution.scheduled event, as the bus delivers
// it). It returns nil and no error when the handoff is for another worker or
// incarnation, was already taken (a duplicate message), or the worker is
// draining (the executor takes it back). Anything but a handoff is an error.
// The Run holds one of the worker's slots until Close.
func (w *Worker) AcceptHandoff(env domain.Envelope) (*Run, error) {
	ev, err := codec.Events.Decode(&env)
	if err != nil {
		return nil, err
	}
	sched, ok := ev.(domain.ExecutionScheduled)
	if !ok {
		return nil, fmt.Errorf("worker: %s on the assignment topic", env.Type)
	}
	_, id := domain.SplitStream(env.Stream)
	key := runKey{id, sched.Attempt}
	w.mu.Lock()
	mine := sched.Worker == w.cfg.ID && (sched.Incarnation == "" || sched.Incarnation == w.incarnation)
	_, dup := w.running[key]
	if mine {
		w.oweLocked(w.incarnation, w.cfg.Clock.Now()) // even one it leaves: the log counts every handoff
	}
	if !mine || dup {
		w.mu.Unlock()
		return nil, nil // another incarnation's handoff, or one already taken: idempotent
	}
	if w.draining || w.stopped || w.isSuperseded() {
		w.mu.Unlock()
		w.log.Info("draining: a new handoff is left for the executor to take back", "execution", id, "attempt", sched.Attempt)
		return nil, nil
	}
	runCtx, cancel := context.WithCancelCause(context.Background())
	w.running[key] = &runEntry{cancel: cancel, incarnation: w.incarnation}
	r := &Run{w: w, key: key, sched: sched, inc: w.incarnation, ctx: runCtx, cancel: cancel}
	w.wg.Add(1)
	w.mu.Unlock()
	// The handoff event alone rebuilds the state the worker acts on: scheduled
	// to us, at this version. Anything appended since makes the append fail
	// and the stream is read again.
	r.x = domain.NewExecution(id)
	r.x.Apply(sched, env.Version, env.Time)
	return r, nil
}

// Execution returns the id of the run's execution.
func (r *Run) Execution() string { return r.key.id }

// Attempt returns the handoff's attempt number.
func (r *Run) Attempt() int { return r.key.attempt }

// Handoff returns the handoff the run acts under.
func (r *Run) Handoff() domain.ExecutionScheduled { return r.sched }

// Context is cancelled when the run must stop: a cancellation request, the
// worker's incarnation replaced, or a drain's grace period over.
func (r *Run) Context() context.Context { return r.ctx }

// Close frees the run's slot. Calling it again does nothing.
func (r *Run) Close() {
	r.close.Do(func() {
		r.w.mu.Lock()
		delete(r.w.running, r.key)
		r.w.mu.Unlock()
		r.cancel(nil)
		r.w.wg.Done()
	})
}

// drive runs r from its start to its end, trying a write again while the
// store is unavailable.
func (w *Worker) drive(r *Run) {
	wctx := context.WithoutCancel(r.ctx) // writes must happen even after the run's ctx ended
	crashpoint.Hit(crashpoint.WorkerGotHandoff)
	started, err := r.Begin(wctx)
	b := retryBackoff()
	for err != nil && b.Tries() < maxTries && b.Wait(w.ctx) {
		started, err = r.Begin(wctx)
	}
	if !started {
		return
	}
	crashpoint.Hit(crashpoint.WorkerStarted)
	result, runErr := w.execute(r.ctx, r.sched)
	crashpoint.Hit(crashpoint.WorkerFinished)
	err = r.End(wctx, result, runErr)
	// While the run is still this worker's (its context alive), its end is
	// retried for as long as the store stays unavailable (an outage of any
	// length: the run's outcome is not thrown away); once the run was
	// stopped (drained, replaced), for maxTries at most.
	b = retryBackoff()
	for err != nil && (b.Tries() < maxTries || r.ctx.Err() == nil) && b.Wait(w.ctx) {
		err = r.End(wctx, result, runErr)
	}
	if err != nil {
		w.log.Error("gave up recording the end of a run: the store stayed unavailable; the executor takes it back once this worker is declared lost",
			"execution", r.key.id, "attempt", r.key.attempt, "err", err)
	}
}

// under wraps a worker decision: it is taken only while the handoff r acts
// under (worker, incarnation, attempt) is the current one and r's
// incarnation is still the worker's.
func (r *Run) under(act func(x *domain.Execution) (domain.Event, error)) repository.Decide {
	w, me := r.w, r.w.cfg.ID
	return func(x *domain.Execution) (domain.Event, error) {
		if cur := w.Incarnation(); cur != r.inc || w.isSuperseded() {
			return nil, fmt.Errorf("worker %s incarnation %s (now %s): %w", me, r.inc, cur, domain.ErrWorkerReplaced)
		}
		if err := x.Holds(me, r.sched.Incarnation, r.sched.Attempt); err != nil {
			return nil, err
		}
		return act(x)
	}
}

// guard fences r's writes with the worker's own stream: each carries the
// condition that the stream is still at the version r's incarnation last
// saw there. Only the incarnation itself writes there, but for a lost
// verdict (or another process registering the same id), so a verdict
// written meanwhile refuses the write atomically, even one decided by an
// executor that had not seen r's handoff (two executors deciding at once).
// When the condition fails (this worker's own heartbeat got there first),
// it reads the stream again. Without atomic multi-stream appends
// (KurrentDB) the run's first write is preceded by a heartbeat of its own
// instead (serialFence), and the execution's version decides the rest.
func (r *Run) guard(ctx context.Context, fresh bool) (eventstore.StreamAppend, error) {
	w := r.w
	if !w.fenced {
		return eventstore.StreamAppend{}, r.serialFence(ctx)
	}
	w.mu.Lock()
	st := w.state // never changed in place once set (heartbeats clone it)
	if w.incarnation != r.inc {
		st = nil
	}
	w.mu.Unlock()
	if st == nil || fresh {
		var err error
		if st, err = repository.RefreshWorker(ctx, w.cfg.Store, w.cfg.ID, st); err != nil {
			return eventstore.StreamAppend{}, err
		}
		w.setState(r.inc, st) // the log's state: the next guard starts from it
	}
	if st.Incarnation() != r.inc || (st.Status() != domain.WorkerActive && st.Status() != domain.WorkerDrainingStatus) {
		return eventstore.StreamAppend{}, fmt.Errorf("worker %s incarnation %s: its stream says incarnation %s, %s: %w",
			w.cfg.ID, r.inc, st.Incarnation(), st.Status(), domain.ErrWorkerReplaced)
	}
	return eventstore.StreamAppend{Stream: domain.WorkerStream(w.cfg.ID), Expected: repository.Expected(st.Version())}, nil
}

// Begin records the start of the run (execution.running), or its
// cancellation if one was requested before it started. started says whether
// the work should go on. A refusal (the execution was taken back or ended
// meanwhile) is logged and gives started false; the error is non-nil only
// when the store was unavailable (repository.Unavailable): the write may or
// may not have landed, and Begin may be called again, which is safe.
func (r *Run) Begin(ctx context.Context) (started bool, err error) {
	w, id, me := r.w, r.key.id, r.w.cfg.ID
	if cause := context.Cause(r.ctx); cause != nil && !errors.Is(cause, errCancelRequested) {
		// Draining or replaced before it started: the executor takes it back.
		w.log.Info("not starting a handoff", "execution", id, "attempt", r.key.attempt, "cause", cause)
		return false, nil
	}
	x, err := repository.UpdateExecutionGuarded(ctx, w.cfg.Store, id, domain.OwnerWorker, me, r.x, r.guard, r.under(func(x *domain.Execution) (domain.Event, error) {
		if x.CancelRequested() {
			ev, err := x.Cancel(domain.OwnerWorker, me, "cancelled before it started")
			ev.Code = domain.CancelRequested
			return ev, err
		}
		return x.Start(me)
	}))
	if repository.Unavailable(err) {
		r.x = x // the state it decided on: the same decision is tried again
		return false, err
	}
	if err != nil {
		w.refused("gave up an execution before starting it: the log decided otherwise", id, r.key.attempt, r.inc, err)
		return false, nil
	}
	r.x = x
	return x.Status() == domain.StatusRunning, nil
}

// End records how the run ended, given what the runner returned (result
// and runErr) and why the run's context ended, if it did: completed,
// failed, timed_out (runErr is context.DeadlineExceeded), or cancelled (a
// cancellation request). A run stopped because its incarnation was replaced
// writes nothing. A refusal (the execution was taken back meanwhile) is
// logged and gives nil; the error is non-nil only when the store was
// unavailable: call End again with the same arguments.
func (r *Run) End(ctx context.Context, result json.RawMessage, runErr error) error {
	w, id, me := r.w, r.key.id, r.w.cfg.ID
	cause := context.Cause(r.ctx)
	if errors.Is(cause, errReplaced) {
		w.log.Warn("run stopped: its incarnation was declared lost, nothing is written for it", "execution", id, "attempt", r.key.attempt)
		return nil
	}
	timeout := time.Duration(r.sched.TimeoutMillis) * time.Millisecond
	result, runErr = w.bound(id, result, runErr)
	var failure *runner.Failure
	var partial json.RawMessage
	if runErr != nil {
		partial = interrupted(runErr)
	}
	var drained drainError
	if runErr != nil && errors.As(cause, &drained) {
		// Stopped by the end of a drain's grace period: nothing is written
		// for it. Once worker.stopped is in the log the executor takes it
		// back (execution.abandoned) and runs it again within its
		// max_attempts, as after a lost worker.
		w.log.Warn("run handed back: it did not finish within the grace period; the executor takes it back and runs it again within max_attempts",
			"execution", id, "attempt", r.key.attempt, "grace", drained.grace)
		return nil
	}
	x, err := repository.UpdateExecutionGuarded(ctx, w.cfg.Store, id, domain.OwnerWorker, me, r.x, r.guard, r.under(func(x *domain.Execution) (domain.Event, error) {
		switch {
		case runErr == nil:
			return x.Complete(domain.OwnerWorker, me, result)
		case errors.As(runErr, &failure):
			// A run the handoff allows to retry ends in execution.run_failed.
			return x.RetryOr(x.Fail(domain.OwnerWorker, me, failure.Message, failure.Result))
		case errors.Is(cause, errCancelRequested):
			ev, err := x.Cancel(domain.OwnerWorker, me, x.CancelReason())
			ev.Code, ev.Result = domain.CancelRequested, partial
			return ev, err
		case r.ctx.Err() != nil:
			return x.Fail(domain.OwnerWorker, me, fmt.Sprintf("interrupted: %v", cause), partial)
		case errors.Is(runErr, context.DeadlineExceeded):
			ev, err := x.TimeOut(me, timeout)
			ev.Result = partial
			return x.RetryOr(ev, err)
		default:
			return x.RetryOr(x.Fail(domain.OwnerWorker, me, runErr.Error(), partial))
		}
	}))
	if repository.Unavailable(err) {
		r.x = x
		return err
	}
	if err != nil {
		w.refused("result refused: the execution is no longer ours", id, r.key.attempt, r.inc, err)
	} else if w.isDraining() {
		w.log.Info("run finished while draining, within the grace period", "execution", id, "attempt", r.key.attempt, "status", x.Status())
	}
	r.x = x
	return nil
}

// bound keeps what a run returned within MaxResultBytes: a result beyond
// it turns the run into a failure that says so, and a failure's or an
// interruption's result beyond it is left out (the message says so).
// Nothing larger is ever written.
func (w *Worker) bound(id string, result json.RawMessage, runErr error) (json.RawMessage, error) {
	max := w.cfg.MaxResultBytes
	if runErr == nil {
		if err := domain.CheckResult(result, max); err != nil {
			w.log.Warn("run failed: its result is too large to record", "execution", id, "bytes", len(result), "max", max)
			return nil, &runner.Failure{Message: err.Error(), Err: err}
		}
		return result, nil
	}
	var failure *runner.Failure
	if errors.As(runErr, &failure) {
		if err := domain.CheckResult(failure.Result, max); err != nil {
			return nil, &runner.Failure{Message: "(its result is left out: " + err.Error() + ") " + failure.Error(), Err: failure.Err}
		}
		return result, runErr
	}
	var intr *runner.Interrupted
	if errors.As(runErr, &intr) && domain.CheckResult(intr.Result, max) != nil {
		return result, intr.Err // the partial result is left out; the cause is kept
	}
	return result, runErr
}

// isDraining reports whether Drain has begun.
func (w *Worker) isDraining() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.draining
}

// interrupted returns the partial result a runner reported with err, if any.
func interrupted(err error) json.RawMessage {
	var intr *runner.Interrupted
	if errors.As(err, &intr) {
		return intr.Result
	}
	return nil
}

// refused logs a write the log refused and, when the refusal says the
// execution was taken back, checks whether this incarnation is still the
// worker's: a worker that was declared lost learns it here, if not already
// from a heartbeat.
func (w *Worker) refused(msg, id string, attempt int, inc string, err error) {
	w.log.Warn(msg, "execution", id, "attempt", attempt, "incarnation", inc, "err", err)
	// After the handoff only its worker ends an execution, so any refusal
	// (even "it has ended") means it was taken back from this handoff.
	var re *domain.RuleError
	if errors.As(err, &re) || errors.Is(err, domain.ErrWorkerReplaced) {
		w.checkReplaced(inc)
	}
}

// execute runs sched's runner, with the action's runner_config next to the
// input and the name of its concurrency_key field (runner.RunKeyed), under ctx with the action's timeout as its
// deadline; an instant runner (runner.IsInstant) gets no deadline of its
// own, as none can pass while it runs.
func (w *Worker) execute(ctx context.Context, sched domain.ExecutionScheduled) (json.RawMessage, error) {
	r, ok := w.cfg.Runners.Lookup(sched.Runner)
	if !ok {
		return nil, &runner.Failure{Message: fmt.Sprintf("runner %q is not available on worker %s", sched.Runner, w.cfg.ID)}
	}
	if timeout := time.Duration(sched.TimeoutMillis) * time.Millisecond; timeout <= 0 || !runner.IsInstant(r) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if sched.ResourceKeyFields != "" {
		return runner.RunKeyed(ctx, r, sched.RunnerConfig, sched.Input, sched.KeyField, strings.Split(sched.ResourceKeyFields, "\n")...)
	}
	return runner.RunKeyed(ctx, r, sched.RunnerConfig, sched.Input, sched.KeyField)
}
