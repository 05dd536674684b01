// Package worker runs a worker: it registers an incarnation in the log,
// renews its lease with heartbeats, takes the handoffs addressed to it from
// the bus, runs them with the built-in runners, and writes only the events the
// handoff rule gives it (running, then completed, failed, timed_out or
// cancelled), each at the execution's expected version.
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
	// StopGrace is how long Stop waits for runs in flight before cancelling them. Default 10s.
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
	cfg         Config
	log         *slog.Logger
	incarnation string
	router      *message.Router

	mu      sync.Mutex
	running map[string]context.CancelCauseFunc // execution → cancel of its run
	state   *domain.Worker
	wg      sync.WaitGroup

	cancel context.CancelFunc
	done   chan struct{}
}

var (
	errCancelRequested = errors.New("cancellation requested")
	errStopping        = errors.New("worker stopping")
)

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
		incarnation: uuid.NewString(), running: map[string]context.CancelCauseFunc{}}, nil
}

// ID returns the worker id; Incarnation this process's incarnation.
func (w *Worker) ID() string          { return w.cfg.ID }
func (w *Worker) Incarnation() string { return w.incarnation }

// Start subscribes to the worker's topics, then registers the incarnation
// (so no handoff can be addressed to it before it listens), then heartbeats.
func (w *Worker) Start(ctx context.Context) error {
	r, err := w.cfg.Bus.NewRouter()
	if err != nil {
		return err
	}
	r.AddNoPublisherHandler("assign-"+w.cfg.ID, bus.AssignTopic(w.cfg.ID), w.cfg.Bus.Subscriber, w.onAssign)
	r.AddNoPublisherHandler("cancel-"+w.cfg.ID, bus.TopicCancel, w.cfg.Bus.Subscriber, w.onCancel)
	w.router = r
	ctx, w.cancel = context.WithCancel(ctx)
	go func() {
		if err := r.Run(ctx); err != nil {
			w.log.Error("router stopped", "err", err)
		}
	}()
	select {
	case <-r.Running():
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := w.register(ctx); err != nil {
		w.cancel()
		_ = r.Close()
		return err
	}
	w.done = make(chan struct{})
	go w.heartbeats(ctx)
	return nil
}

func (w *Worker) register(ctx context.Context) error {
	host, _ := os.Hostname()
	st, err := aggregate.UpdateWorker(ctx, w.cfg.Store, w.cfg.ID, domain.OwnerWorker, w.cfg.ID, nil, func(s *domain.Worker) (domain.Event, error) {
		return s.Register(w.incarnation, w.cfg.Slots, w.cfg.Runners.Names(), host, os.Getpid())
	})
	if err != nil {
		return fmt.Errorf("worker %s: register: %w", w.cfg.ID, err)
	}
	w.mu.Lock()
	w.state = st
	w.mu.Unlock()
	w.log.Info("registered", "incarnation", w.incarnation, "slots", w.cfg.Slots)
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
		known, inFlight := w.state, len(w.running)
		w.mu.Unlock()
		st, err := aggregate.UpdateWorker(ctx, w.cfg.Store, w.cfg.ID, domain.OwnerWorker, w.cfg.ID, known, func(s *domain.Worker) (domain.Event, error) {
			return s.Heartbeat(w.incarnation, inFlight)
		})
		switch {
		case errors.Is(err, domain.ErrWorkerReplaced):
			// The log says this incarnation is gone: its handoffs were taken
			// back, so its runs' results would be refused. Stop them and start
			// over as a new incarnation.
			w.log.Warn("this incarnation was declared lost; starting a new one", "incarnation", w.incarnation)
			w.cancelAll(errors.New("worker incarnation replaced"))
			w.mu.Lock()
			w.incarnation = uuid.NewString()
			w.mu.Unlock()
			if err := w.register(ctx); err != nil && ctx.Err() == nil {
				w.log.Error("cannot register again", "err", err)
			}
		case err != nil:
			if ctx.Err() == nil {
				w.log.Warn("heartbeat failed", "err", err)
			}
			w.mu.Lock()
			w.state = nil
			w.mu.Unlock()
		default:
			w.mu.Lock()
			w.state = st
			w.mu.Unlock()
		}
	}
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
	w.mu.Lock()
	mine := sched.Worker == w.cfg.ID && (sched.Incarnation == "" || sched.Incarnation == w.incarnation)
	_, dup := w.running[id]
	if !mine || dup {
		w.mu.Unlock()
		return nil // another incarnation's handoff, or one already taken: idempotent
	}
	runCtx, cancel := context.WithCancelCause(context.Background())
	w.running[id] = cancel
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
			delete(w.running, id)
			w.mu.Unlock()
			cancel(nil)
		}()
		w.run(runCtx, x, sched)
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
	cancel := w.running[id]
	w.mu.Unlock()
	if cancel != nil {
		cancel(errCancelRequested)
	}
	return nil
}

func (w *Worker) cancelAll(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.running {
		c(cause)
	}
}

// run starts, runs and ends one execution. Every write goes through the
// domain's decision on the latest state; a refusal means the execution was
// taken back (or cancelled) meanwhile, and the worker gives up, saying so.
func (w *Worker) run(ctx context.Context, x *domain.Execution, sched domain.ExecutionScheduled) {
	id, me := x.ID(), w.cfg.ID
	wctx := context.WithoutCancel(ctx) // writes must happen even after the run's ctx ended
	x, err := aggregate.UpdateExecution(wctx, w.cfg.Store, id, domain.OwnerWorker, me, x, func(x *domain.Execution) (domain.Event, error) {
		if x.CancelRequested() {
			return x.Cancel(domain.OwnerWorker, me, "cancelled before it started")
		}
		return x.Start(me)
	})
	if err != nil {
		w.log.Warn("gave up an execution before starting it", "execution", id, "attempt", sched.Attempt, "err", err)
		return
	}
	if x.Status() != domain.StatusRunning {
		return
	}
	timeout := time.Duration(sched.TimeoutMillis) * time.Millisecond
	runCtx, cancelTimeout := context.WithTimeout(ctx, timeout)
	result, runErr := w.execute(runCtx, sched)
	cancelTimeout()
	var failure *runner.Failure
	_, err = aggregate.UpdateExecution(wctx, w.cfg.Store, id, domain.OwnerWorker, me, x, func(x *domain.Execution) (domain.Event, error) {
		switch {
		case runErr == nil:
			return x.Complete(domain.OwnerWorker, me, result)
		case errors.As(runErr, &failure):
			return x.Fail(domain.OwnerWorker, me, failure.Message, failure.Result)
		case errors.Is(context.Cause(ctx), errCancelRequested):
			return x.Cancel(domain.OwnerWorker, me, "cancelled on request")
		case ctx.Err() != nil:
			return x.Fail(domain.OwnerWorker, me, fmt.Sprintf("interrupted: %v", context.Cause(ctx)), nil)
		case errors.Is(runErr, context.DeadlineExceeded):
			return x.TimeOut(me, timeout)
		default:
			return x.Fail(domain.OwnerWorker, me, runErr.Error(), nil)
		}
	})
	if err != nil {
		w.log.Warn("result refused: the execution is no longer ours", "execution", id, "attempt", sched.Attempt, "err", err)
	}
}

func (w *Worker) execute(ctx context.Context, sched domain.ExecutionScheduled) (json.RawMessage, error) {
	r, ok := w.cfg.Runners.Lookup(sched.Runner)
	if !ok {
		return nil, &runner.Failure{Message: fmt.Sprintf("runner %q is not available on worker %s", sched.Runner, w.cfg.ID)}
	}
	return r.Run(ctx, sched.Input)
}

// Stop stops taking handoffs, lets runs in flight finish within StopGrace
// (then cancels them: they are recorded as failed), and records worker.stopped.
func (w *Worker) Stop() {
	if w.cancel == nil {
		return
	}
	_ = w.router.Close()
	finished := make(chan struct{})
	go func() { w.wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(w.cfg.StopGrace):
		w.cancelAll(errStopping)
		<-finished
	}
	w.cancel()
	if w.done != nil {
		<-w.done
	}
	w.mu.Lock()
	known := w.state
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := aggregate.UpdateWorker(ctx, w.cfg.Store, w.cfg.ID, domain.OwnerWorker, w.cfg.ID, known, func(s *domain.Worker) (domain.Event, error) {
		return s.Stop(w.incarnation)
	}); err != nil {
		w.log.Warn("cannot record worker.stopped", "err", err)
	}
}
