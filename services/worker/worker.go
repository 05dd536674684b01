// Package worker runs a worker: it registers an incarnation in the log,
// renews its lease with heartbeats, takes the handoffs addressed to it from
// the bus, runs them with the built-in runners, and writes only the events the
// handoff rule gives it (running, then completed, failed, timed_out or
// cancelled), each at the execution's expected version and only while the
// handoff it acts under is still the current one (domain.Execution.Holds).
//
// When the log says its incarnation was declared lost (a heartbeat refused,
// or a result refused because the execution was taken back), the worker
// stops the runs of that incarnation without writing for them and registers
// as a new incarnation. Drain ends a worker gracefully.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/services/aggregate"
	"github.com/turnstile/turnstile/services/bus"
	"github.com/turnstile/turnstile/services/crashpoint"
	"github.com/turnstile/turnstile/services/runner"
)

// Config configures a Worker. Zero fields take the defaults below.
type Config struct {
	ID      string // stable worker id, e.g. "local-1"
	Slots   int    // executions run at once; default 16
	Store   eventstore.Store
	Bus     *bus.Bus
	Runners *runner.Registry // default runner.Builtins(runner.Config{})
	Logger  *slog.Logger
	// Heartbeat is the lease renewal interval. Default 2s.
	Heartbeat time.Duration
	// StopGrace is the grace period Stop drains with. Default 10s.
	StopGrace time.Duration
}

// Validate checks the configuration after defaults.
func (c *Config) Validate() error {
	switch {
	case c.ID == "" || len(c.ID) > domain.MaxIDLen:
		return fmt.Errorf("worker: ID must be 1..%d bytes", domain.MaxIDLen)
	case eventstore.ValidateStream(domain.WorkerStream(c.ID)) != nil:
		return fmt.Errorf("worker: ID %q is not usable in a stream name", c.ID)
	case c.Slots < 1 || c.Slots > 100_000:
		return fmt.Errorf("worker: Slots %d must be 1..100000", c.Slots)
	case c.Store == nil || c.Bus == nil:
		return errors.New("worker: Store and Bus are required")
	case c.Heartbeat < time.Millisecond:
		return fmt.Errorf("worker: Heartbeat %s below 1ms", c.Heartbeat)
	}
	return nil
}

// Worker runs executions handed to it.
type Worker struct {
	cfg    Config
	log    *slog.Logger
	router *message.Router
	ctx    context.Context // the worker's own, for writes outside a handler

	mu          sync.Mutex
	incarnation string
	state       *domain.Worker // the worker stream as last written, or nil
	running     map[runKey]*runEntry
	draining    bool // set by Drain: no new handoff is taken
	stopped     bool
	wg          sync.WaitGroup // runs in flight

	regMu sync.Mutex // serialises re-registrations

	cancel context.CancelFunc
	done   chan struct{} // closed when the heartbeat loop has returned
}

// runKey names one run: an attempt of an execution. A worker may be handed
// the same execution again (a new attempt after a take-back).
type runKey struct {
	id      string
	attempt int
}

type runEntry struct {
	cancel      context.CancelCauseFunc
	incarnation string
}

var (
	errCancelRequested = errors.New("cancellation requested")
	errReplaced        = errors.New("this worker incarnation was declared lost or replaced")
)

// drainError is the cause of a run stopped because the worker drained.
type drainError struct {
	worker string
	grace  time.Duration
}

func (e drainError) Error() string {
	return fmt.Sprintf("worker %s drained and the run did not finish within the grace period of %s", e.worker, e.grace)
}

// New checks cfg and returns a worker; it does nothing until Start.
func New(cfg Config) (*Worker, error) {
	if cfg.Slots == 0 {
		cfg.Slots = 16
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 2 * time.Second
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Runners == nil {
		cfg.Runners = runner.Builtins(runner.Config{})
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Worker{cfg: cfg, log: cfg.Logger.With("component", "worker", "worker", cfg.ID),
		incarnation: uuid.NewString(), running: map[runKey]*runEntry{}}, nil
}

// ID returns the worker id.
func (w *Worker) ID() string { return w.cfg.ID }

// Incarnation returns the worker's current incarnation: a new one after it
// learned that the previous one was declared lost.
func (w *Worker) Incarnation() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.incarnation
}

// Start subscribes to the worker's topics, then registers the incarnation
// (so no handoff can be addressed to it before it listens), then heartbeats.
func (w *Worker) Start(ctx context.Context) error {
	r, err := w.cfg.Bus.NewRouter()
	if err != nil {
		return err
	}
	r.AddConsumerHandler("assign-"+w.cfg.ID, bus.AssignTopic(w.cfg.ID), w.cfg.Bus.Subscriber, w.onAssign)
	r.AddConsumerHandler("cancel-"+w.cfg.ID, bus.TopicCancel, w.cfg.Bus.Subscriber, w.onCancel)
	w.router = r
	ctx, cancel := context.WithCancel(ctx)
	w.ctx = ctx
	go func() {
		if err := r.Run(ctx); err != nil {
			w.log.Error("router stopped", "err", err)
		}
	}()
	select {
	case <-r.Running():
	case <-ctx.Done():
		cancel()
		return ctx.Err()
	}
	if err := w.register(ctx); err != nil {
		cancel()
		_ = r.Close()
		return err
	}
	w.mu.Lock()
	w.cancel = cancel
	w.mu.Unlock()
	w.done = make(chan struct{})
	go w.heartbeats(ctx)
	return nil
}

func (w *Worker) register(ctx context.Context) error {
	host, _ := os.Hostname()
	inc := w.Incarnation()
	st, err := aggregate.UpdateWorker(ctx, w.cfg.Store, w.cfg.ID, domain.OwnerWorker, w.cfg.ID, nil, func(s *domain.Worker) (domain.Event, error) {
		return s.Register(inc, w.cfg.Slots, w.cfg.Runners.Names(), host, os.Getpid())
	})
	if err != nil {
		return fmt.Errorf("worker %s: register: %w", w.cfg.ID, err)
	}
	w.mu.Lock()
	if w.incarnation == inc {
		w.state = st
	}
	w.mu.Unlock()
	w.log.Info("registered", "incarnation", inc, "slots", w.cfg.Slots)
	return nil
}

func (w *Worker) heartbeats(ctx context.Context) {
	defer close(w.done)
	t := time.NewTicker(w.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		known, inFlight, inc := w.state.Clone(), len(w.running), w.incarnation
		w.mu.Unlock()
		st, err := aggregate.UpdateWorker(ctx, w.cfg.Store, w.cfg.ID, domain.OwnerWorker, w.cfg.ID, known, func(s *domain.Worker) (domain.Event, error) {
			return s.Heartbeat(inc, inFlight)
		})
		switch {
		case errors.Is(err, domain.ErrWorkerReplaced), errors.Is(err, domain.ErrWorkerNotRegistered):
			w.replaced(ctx, inc)
		case err != nil:
			if ctx.Err() == nil {
				w.log.Warn("heartbeat failed", "err", err)
			}
			w.setState(inc, nil)
		default:
			w.setState(inc, st)
		}
	}
}

// setState records the worker stream's state as inc last wrote it.
func (w *Worker) setState(inc string, st *domain.Worker) {
	w.mu.Lock()
	if w.incarnation == inc {
		w.state = st
	}
	w.mu.Unlock()
}

// replaced is called when the log says incarnation old is no longer this
// worker's (declared lost, or another process registered the same id). The
// executions handed to old have been (or will be) taken back: stop their
// runs, which then write nothing, and start over as a new incarnation.
// Nothing happens if old is no longer current, or while draining.
func (w *Worker) replaced(ctx context.Context, old string) {
	w.regMu.Lock()
	defer w.regMu.Unlock()
	w.mu.Lock()
	if w.incarnation != old || w.draining || w.stopped {
		w.mu.Unlock()
		return
	}
	w.incarnation, w.state = uuid.NewString(), nil
	stopped := 0
	for _, r := range w.running {
		if r.incarnation == old {
			r.cancel(errReplaced)
			stopped++
		}
	}
	w.mu.Unlock()
	w.log.Warn("the log says this incarnation was declared lost or replaced; its runs are stopped and a new incarnation registers",
		"old_incarnation", old, "runs_stopped", stopped)
	if err := w.register(ctx); err != nil && ctx.Err() == nil {
		w.log.Error("cannot register a new incarnation; the next heartbeat tries again", "err", err)
	}
}

// checkReplaced reads the worker stream after a write of incarnation inc
// was refused, and starts over as a new incarnation if inc is no longer the
// current one there.
func (w *Worker) checkReplaced(inc string) {
	ctx := w.ctx
	st, err := aggregate.LoadWorker(ctx, w.cfg.Store, w.cfg.ID)
	if err != nil {
		return
	}
	if st.Incarnation() == inc && (st.Status() == domain.WorkerActive || st.Status() == domain.WorkerDrainingStatus) {
		return // still ours: the execution alone was taken back (say, its handoff expired)
	}
	w.replaced(ctx, inc)
}

// onAssign takes a handoff. It returns at once (the run goes on in its own
// goroutine) so one slow action never holds up the topic.
func (w *Worker) onAssign(msg *message.Message) error {
	env, err := bus.DecodeEvent(msg)
	if err != nil {
		return err // poison after retries
	}
	ev, err := domain.Catalogue.Decode(&env)
	if err != nil {
		return err
	}
	sched, ok := ev.(domain.ExecutionScheduled)
	if !ok {
		return fmt.Errorf("worker: %s on the assignment topic", env.Type)
	}
	_, id := domain.SplitStream(env.Stream)
	key := runKey{id, sched.Attempt}
	w.mu.Lock()
	mine := sched.Worker == w.cfg.ID && (sched.Incarnation == "" || sched.Incarnation == w.incarnation)
	_, dup := w.running[key]
	if !mine || dup {
		w.mu.Unlock()
		return nil // another incarnation's handoff, or one already taken: idempotent
	}
	if w.draining || w.stopped {
		w.mu.Unlock()
		w.log.Info("draining: a new handoff is left for the executor to take back", "execution", id, "attempt", sched.Attempt)
		return nil
	}
	runCtx, cancel := context.WithCancelCause(context.Background())
	w.running[key] = &runEntry{cancel: cancel, incarnation: w.incarnation}
	inc := w.incarnation
	w.wg.Add(1)
	w.mu.Unlock()
	// The handoff event alone rebuilds the state the worker acts on: scheduled
	// to us, at this version. Anything appended since makes the append fail
	// and the stream is read again.
	x := domain.NewExecution(id)
	x.Apply(sched, env.Version, env.Time)
	go func() {
		defer w.wg.Done()
		defer func() {
			w.mu.Lock()
			delete(w.running, key)
			w.mu.Unlock()
			cancel(nil)
		}()
		w.run(runCtx, x, sched, inc)
	}()
	return nil
}

func (w *Worker) onCancel(msg *message.Message) error {
	env, err := bus.DecodeEvent(msg)
	if err != nil {
		return err
	}
	_, id := domain.SplitStream(env.Stream)
	w.mu.Lock()
	for k, r := range w.running {
		if k.id == id {
			r.cancel(errCancelRequested)
		}
	}
	w.mu.Unlock()
	return nil
}

// cancelAll stops every run with cause and returns how many there were.
func (w *Worker) cancelAll(cause error) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.running {
		r.cancel(cause)
	}
	return len(w.running)
}

// run starts, runs and ends one execution. Every write goes through the
// domain's decision on the latest state, and only while the handoff it acts
// under (worker, incarnation, attempt) is the current one and inc is still
// this worker's incarnation; a refusal means the execution was taken back (or
// cancelled) meanwhile, and the worker gives up, saying so.
func (w *Worker) run(ctx context.Context, x *domain.Execution, sched domain.ExecutionScheduled, inc string) {
	id, me := x.ID(), w.cfg.ID
	wctx := context.WithoutCancel(ctx) // writes must happen even after the run's ctx ended
	under := func(act func(x *domain.Execution) (domain.Event, error)) aggregate.Decision {
		return func(x *domain.Execution) (domain.Event, error) {
			if cur := w.Incarnation(); cur != inc {
				return nil, fmt.Errorf("worker %s incarnation %s (now %s): %w", me, inc, cur, domain.ErrWorkerReplaced)
			}
			if err := x.Holds(me, sched.Incarnation, sched.Attempt); err != nil {
				return nil, err
			}
			return act(x)
		}
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, errCancelRequested) {
		// Draining or replaced before it started: the executor takes it back.
		w.log.Info("not starting a handoff", "execution", id, "attempt", sched.Attempt, "cause", cause)
		return
	}
	crashpoint.Hit(crashpoint.WorkerAssigned)
	x, err := aggregate.UpdateExecution(wctx, w.cfg.Store, id, domain.OwnerWorker, me, x, under(func(x *domain.Execution) (domain.Event, error) {
		if x.CancelRequested() {
			ev, err := x.Cancel(domain.OwnerWorker, me, "cancelled before it started")
			ev.Code = domain.CancelRequested
			return ev, err
		}
		return x.Start(me)
	}))
	if err != nil {
		w.refused("gave up an execution before starting it: the log decided otherwise", id, sched.Attempt, inc, err)
		return
	}
	if x.Status() != domain.StatusRunning {
		return
	}
	crashpoint.Hit(crashpoint.WorkerStarted)
	timeout := time.Duration(sched.TimeoutMillis) * time.Millisecond
	runCtx, cancelTimeout := context.WithTimeout(ctx, timeout)
	result, runErr := w.execute(runCtx, sched)
	cancelTimeout()
	crashpoint.Hit(crashpoint.WorkerFinished)
	cause := context.Cause(ctx)
	if errors.Is(cause, errReplaced) {
		w.log.Warn("run stopped: its incarnation was declared lost, nothing is written for it", "execution", id, "attempt", sched.Attempt)
		return
	}
	var failure *runner.Failure
	var partial json.RawMessage
	if intr := (*runner.Interrupted)(nil); errors.As(runErr, &intr) {
		partial = intr.Result
	}
	var drained drainError
	_, err = aggregate.UpdateExecution(wctx, w.cfg.Store, id, domain.OwnerWorker, me, x, under(func(x *domain.Execution) (domain.Event, error) {
		switch {
		case runErr == nil:
			return x.Complete(domain.OwnerWorker, me, result)
		case errors.As(runErr, &failure):
			return x.Fail(domain.OwnerWorker, me, failure.Message, failure.Result)
		case errors.Is(cause, errCancelRequested):
			ev, err := x.Cancel(domain.OwnerWorker, me, x.CancelReason())
			ev.Code, ev.Result = domain.CancelRequested, partial
			return ev, err
		case errors.As(cause, &drained):
			ev, err := x.Fail(domain.OwnerWorker, me, drained.Error(), partial)
			ev.Code = domain.FailDrain
			return ev, err
		case ctx.Err() != nil:
			return x.Fail(domain.OwnerWorker, me, fmt.Sprintf("interrupted: %v", cause), partial)
		case errors.Is(runErr, context.DeadlineExceeded):
			ev, err := x.TimeOut(me, timeout)
			ev.Result = partial
			return ev, err
		default:
			return x.Fail(domain.OwnerWorker, me, runErr.Error(), partial)
		}
	}))
	if err != nil {
		w.refused("result refused: the execution is no longer ours", id, sched.Attempt, inc, err)
	}
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
	if errors.As(err, &re) {
		w.checkReplaced(inc)
	}
}

func (w *Worker) execute(ctx context.Context, sched domain.ExecutionScheduled) (json.RawMessage, error) {
	r, ok := w.cfg.Runners.Lookup(sched.Runner)
	if !ok {
		return nil, &runner.Failure{Message: fmt.Sprintf("runner %q is not available on worker %s", sched.Runner, w.cfg.ID)}
	}
	return r.Run(ctx, sched.Input)
}

// Drain ends the worker gracefully. It records worker.draining (from then on
// the executor hands it nothing new, and takes back the handoffs it has not
// started), takes no new handoff, lets the runs in flight finish for up to
// grace (less if ctx ends first; cancellation requests still reach them
// meanwhile), stops the ones still running, which are recorded as failed with
// code "drain" and their partial result, and records worker.stopped. It
// returns when all of that is done; calling it again, or Stop after it, does
// nothing. The error is that of recording worker.stopped, if any.
func (w *Worker) Drain(ctx context.Context, grace time.Duration) error {
	w.mu.Lock()
	if w.cancel == nil || w.draining {
		w.mu.Unlock()
		return nil
	}
	w.draining = true
	w.mu.Unlock()
	w.regMu.Lock() // after a re-registration in progress, if any
	w.mu.Lock()
	inc, known, inFlight := w.incarnation, w.state.Clone(), len(w.running)
	w.mu.Unlock()
	w.regMu.Unlock()

	wctx, cancelWrite := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancelWrite()
	st, err := aggregate.UpdateWorker(wctx, w.cfg.Store, w.cfg.ID, domain.OwnerWorker, w.cfg.ID, known, func(s *domain.Worker) (domain.Event, error) {
		return s.Drain(inc)
	})
	if err != nil {
		w.log.Warn("cannot record worker.draining", "err", err)
	} else {
		w.setState(inc, st)
	}
	w.log.Info("draining", "incarnation", inc, "in_flight", inFlight, "grace", grace)

	finished := make(chan struct{})
	go func() { w.wg.Wait(); close(finished) }()
	t := time.NewTimer(grace)
	select {
	case <-finished:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	select {
	case <-finished:
	default:
		n := w.cancelAll(drainError{worker: w.cfg.ID, grace: grace})
		w.log.Warn("grace period over: stopping the runs still in flight", "runs", n)
		<-finished
	}

	_ = w.router.Close()
	w.mu.Lock()
	cancel := w.cancel
	w.mu.Unlock()
	cancel()
	<-w.done
	w.mu.Lock()
	w.stopped = true
	known = w.state.Clone()
	w.mu.Unlock()
	sctx, cancelStop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancelStop()
	_, err = aggregate.UpdateWorker(sctx, w.cfg.Store, w.cfg.ID, domain.OwnerWorker, w.cfg.ID, known, func(s *domain.Worker) (domain.Event, error) {
		return s.Stop(inc)
	})
	if errors.Is(err, domain.ErrWorkerReplaced) {
		return nil // declared lost meanwhile: there is nothing of ours to stop
	}
	if err != nil {
		w.log.Warn("cannot record worker.stopped", "err", err)
		return fmt.Errorf("worker %s: record worker.stopped: %w", w.cfg.ID, err)
	}
	w.log.Info("stopped", "incarnation", inc)
	return nil
}

// Stop drains the worker with the configured StopGrace.
func (w *Worker) Stop() {
	_ = w.Drain(context.Background(), w.cfg.StopGrace)
}
