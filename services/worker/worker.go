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
// as a new incarnation. When the log says another process registered the
// same worker id since (a newer incarnation that is not this worker's), the
// newer one wins: this worker stops its runs without writing for them, never
// registers again, and closes Superseded, so two processes with one id never
// both act. Drain ends a worker gracefully.
package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/internal/gopool"
	"github.com/turnstile/turnstile/internal/startstop"
	"github.com/turnstile/turnstile/services/bus"
	"github.com/turnstile/turnstile/services/crashpoint"
	"github.com/turnstile/turnstile/services/repository"
	"github.com/turnstile/turnstile/services/runner"
)

// Config configures a Worker. Zero fields take the defaults below.
type Config struct {
	ID      string // stable worker id, e.g. "local-1"
	Slots   int    // executions run at once; default 16
	Store   eventstore.Store
	Bus     *bus.Bus
	Runners *runner.Registry // default runner.Builtins(runner.Config{}): neither core.shell nor core.http
	Logger  *slog.Logger
	// Heartbeat is the lease renewal interval. Default 2s.
	Heartbeat time.Duration
	// StopGrace is the grace period Stop drains with. Default 10s.
	StopGrace time.Duration
	// NewIncarnation names each incarnation the worker registers. Default:
	// a random UUID. A simulation sets it to replay a run exactly.
	NewIncarnation func() string
	// Host and PID are recorded in worker.registered. Default: the
	// machine's host name and this process's id.
	Host string
	PID  int
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
	case c.Store == nil:
		return errors.New("worker: Store is required")
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
	mine        map[string]bool // every incarnation this worker made
	state       *domain.Worker  // the worker stream as last written, or nil
	fenced      bool            // the store appends atomically to several streams: runs' writes carry a condition on the worker stream (see Run.guard)
	running     map[runKey]*runEntry
	draining    bool // set by Drain: no new handoff is taken
	stopped     bool
	superseded  chan struct{}  // closed when another process took this worker id
	supersedeBy string         // the incarnation that took it
	wg          sync.WaitGroup // runs in flight

	regMu sync.Mutex // serialises re-registrations

	runs *gopool.Pool // the goroutines that drive runs (see spawn); set by Start

	cancel context.CancelFunc
	done   chan struct{}    // closed when the heartbeat loop has returned
	ready  startstop.Signal // closed once Start has registered (lifecycle.go)
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
	return fmt.Sprintf("worker %s drained and the run did not finish within the grace period of %s; handed back", e.worker, e.grace)
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
	if cfg.NewIncarnation == nil {
		cfg.NewIncarnation = uuid.NewString
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	if cfg.PID == 0 {
		cfg.PID = os.Getpid()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	inc := cfg.NewIncarnation()
	return &Worker{cfg: cfg, log: cfg.Logger.With("component", "worker", "worker", cfg.ID), ctx: context.Background(),
		incarnation: inc, mine: map[string]bool{inc: true}, running: map[runKey]*runEntry{}, superseded: make(chan struct{}),
		fenced: eventstore.AtomicMultiStream(cfg.Store),
	}, nil
}

// Superseded is closed when the log shows that another process registered
// this worker's id after it: this worker has stopped its runs (writing
// nothing for them) and acts no more; its owner should Stop it and end.
func (w *Worker) Superseded() <-chan struct{} { return w.superseded }

// SupersededBy returns the incarnation that took this worker's id, or "".
func (w *Worker) SupersededBy() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.supersedeBy
}

func (w *Worker) isSuperseded() bool {
	select {
	case <-w.superseded:
		return true
	default:
		return false
	}
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
	if w.cfg.Bus == nil {
		return errors.New("worker: Start needs a Bus")
	}
	r, err := w.cfg.Bus.NewRouter()
	if err != nil {
		return err
	}
	r.AddConsumerHandler("handoff-"+w.cfg.ID, bus.HandoffTopic(w.cfg.ID), w.cfg.Bus.Subscriber, w.onHandoffs)
	r.AddConsumerHandler("cancel-"+w.cfg.ID, bus.TopicCancel, w.cfg.Bus.Subscriber, w.onCancel)
	w.router = r
	ctx, cancel := context.WithCancel(ctx)
	w.ctx = ctx
	w.runs = gopool.New(idleRunner, ctx.Done())
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
	if err := w.registerRetrying(ctx); err != nil {
		cancel()
		_ = r.Close()
		return err
	}
	w.mu.Lock()
	w.cancel = cancel
	w.mu.Unlock()
	w.done = make(chan struct{})
	go w.heartbeats(ctx)
	w.ready.Close()
	return nil
}

// Register records the current incarnation in the log (worker.registered).
// Start does it; a simulation that drives the worker step by step calls it.
func (w *Worker) Register(ctx context.Context) error { return w.register(ctx) }

// registerRetrying registers, trying again while the store is unavailable.
func (w *Worker) registerRetrying(ctx context.Context) error {
	err := w.register(ctx)
	for try := 0; repository.Unavailable(err) && try < maxTries && pause(ctx, try); try++ {
		err = w.register(ctx)
	}
	return err
}

// maxTries bounds how often the worker tries a write again while the store
// is unavailable (with pauses of 10ms doubling up to 1s: about a minute).
const maxTries = 64

// pause waits before try number try+1 of a write; false if ctx ended first.
func pause(ctx context.Context, try int) bool {
	d := min(10*time.Millisecond<<min(try, 7), time.Second)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (w *Worker) register(ctx context.Context) error {
	inc := w.Incarnation()
	st, err := repository.UpdateWorker(ctx, w.cfg.Store, w.cfg.ID, domain.OwnerWorker, w.cfg.ID, nil, func(s *domain.Worker) (domain.Event, error) {
		return s.Register(inc, w.cfg.Slots, w.cfg.Runners.Names(), w.cfg.Host, w.cfg.PID)
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
		_ = w.Heartbeat(ctx)
		if w.isSuperseded() {
			return
		}
	}
}

// Heartbeat renews the lease of the current incarnation (one
// worker.heartbeat). When the log says the incarnation was replaced, it
// stops that incarnation's runs and registers a new one. Start's loop calls
// it every Config.Heartbeat; a simulation calls it itself. The error is the
// store's, if the write failed.
func (w *Worker) Heartbeat(ctx context.Context) error {
	w.mu.Lock()
	known, inFlight, inc := w.state.Clone(), len(w.running), w.incarnation
	w.mu.Unlock()
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
		w.setState(inc, st)
		return nil
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
// runs, which then write nothing, and start over as a new incarnation; or,
// if the worker stream's current incarnation is another process's, stop for
// good (see Superseded). Nothing happens if old is no longer current, or
// while draining.
func (w *Worker) replaced(ctx context.Context, old string) {
	w.regMu.Lock()
	defer w.regMu.Unlock()
	if cur, err := repository.LoadWorker(ctx, w.cfg.Store, w.cfg.ID); err == nil && cur.Status() != domain.WorkerUnknown {
		w.mu.Lock()
		other := !w.mine[cur.Incarnation()]
		w.mu.Unlock()
		if other {
			w.supersede(old, cur.Incarnation())
			return
		}
	}
	w.mu.Lock()
	if w.incarnation != old || w.draining || w.stopped {
		w.mu.Unlock()
		return
	}
	w.incarnation, w.state = w.cfg.NewIncarnation(), nil
	w.mine[w.incarnation] = true
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

// supersede stops every run, writing nothing for them, and closes
// Superseded: incarnation by, not this worker's, registered the same id.
func (w *Worker) supersede(old, by string) {
	w.mu.Lock()
	if w.isSuperseded() {
		w.mu.Unlock()
		return
	}
	w.supersedeBy = by
	close(w.superseded)
	for _, r := range w.running {
		r.cancel(errReplaced)
	}
	stopped := len(w.running)
	w.mu.Unlock()
	w.log.Error("another process registered this worker id: the newer one takes over, this one stops acting and does not register again",
		"incarnation", old, "superseded_by", by, "runs_stopped", stopped)
}

// checkReplaced reads the worker stream after a write of incarnation inc
// was refused, and starts over as a new incarnation if inc is no longer the
// current one there.
func (w *Worker) checkReplaced(inc string) {
	ctx := w.ctx
	st, err := repository.LoadWorker(ctx, w.cfg.Store, w.cfg.ID)
	if err != nil {
		return
	}
	if st.Incarnation() == inc && (st.Status() == domain.WorkerActive || st.Status() == domain.WorkerDrainingStatus) {
		return // still ours: the execution alone was taken back (say, its handoff expired)
	}
	w.replaced(ctx, inc)
}

// onHandoffs takes the handoffs of a message. It returns at once (each run
// goes on in its own goroutine) so one slow action never holds up the
// topic. A handoff it cannot take (an undecodable event) fails the message,
// after the others were taken: it is retried, then set aside as poison;
// handing the others again does nothing (AcceptHandoff is idempotent, and the
// log refuses a second start).
func (w *Worker) onHandoffs(msg *message.Message) error {
	envs, err := bus.DecodeEvents(msg)
	if err != nil {
		return err // poison after retries
	}
	var first error
	for _, env := range envs {
		r, err := w.AcceptHandoff(env)
		if err != nil {
			first = cmp.Or(first, err)
			continue
		}
		if r != nil {
			w.spawn(r)
		}
	}
	return first
}

// spawn drives r on a goroutine of the worker's pool: one kept from an
// earlier run (its stack grown already) if one is idle.
func (w *Worker) spawn(r *Run) {
	w.runs.Go(func() {
		w.drive(r)
		r.Close()
	})
}

// idleRunner is how long a run goroutine waits for the next run (it also
// ends when the worker stops).
const idleRunner = 10 * time.Second

func (w *Worker) onCancel(msg *message.Message) error {
	envs, err := bus.DecodeEvents(msg)
	if err != nil {
		return err
	}
	for _, env := range envs {
		w.Cancel(env)
	}
	return nil
}

// Cancel passes a cancellation request (the execution.cancel_requested
// event, as the bus delivers it) to this worker's runs of that execution,
// if any.
func (w *Worker) Cancel(env domain.Envelope) {
	_, id := domain.SplitStream(env.Stream)
	w.mu.Lock()
	for k, r := range w.running {
		if k.id == id {
			r.cancel(errCancelRequested)
		}
	}
	w.mu.Unlock()
}

// cancelAll stops every run with cause and returns their executions' ids.
func (w *Worker) cancelAll(cause error) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]string, 0, len(w.running))
	for k, r := range w.running {
		r.cancel(cause)
		ids = append(ids, k.id)
	}
	slices.Sort(ids)
	return ids
}

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
	for try := 0; err != nil && try < maxTries && pause(w.ctx, try); try++ {
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
	for try := 0; err != nil && (try < maxTries || r.ctx.Err() == nil) && pause(w.ctx, try); try++ {
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
// (KurrentDB) there is no fence: the execution's version alone decides.
func (r *Run) guard(ctx context.Context, fresh bool) (eventstore.StreamAppend, error) {
	w := r.w
	if !w.fenced {
		return eventstore.StreamAppend{}, nil
	}
	w.mu.Lock()
	st := w.state // never changed in place once set (heartbeats clone it)
	if w.incarnation != r.inc {
		st = nil
	}
	w.mu.Unlock()
	if st == nil || fresh {
		var err error
		if st, err = repository.CatchUpWorker(ctx, w.cfg.Store, w.cfg.ID, st); err != nil {
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
	return runner.RunKeyed(ctx, r, sched.RunnerConfig, sched.Input, sched.KeyField)
}

// Drain ends the worker gracefully. It records worker.draining (from then on
// the executor hands it nothing new, and takes back the handoffs it has not
// started), takes no new handoff, lets the runs in flight finish for up to
// grace (less if ctx ends first; cancellation requests still reach them
// meanwhile), stops the ones still running and hands them back (it writes
// nothing for them: once worker.stopped is in the log the executor takes
// them back and runs them again within their max_attempts, as after a lost
// worker), and records worker.stopped. The log names each run that
// finished within the grace period and each one handed back. It
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
	if w.isSuperseded() {
		// Another process owns the id: write nothing, just let go.
		w.wg.Wait() // its runs were stopped and write nothing
		_ = w.router.Close()
		w.mu.Lock()
		cancel := w.cancel
		w.mu.Unlock()
		cancel()
		<-w.done
		w.mu.Lock()
		w.stopped = true
		w.mu.Unlock()
		w.log.Info("stopped (superseded)")
		return nil
	}
	w.regMu.Lock() // after a re-registration in progress, if any
	w.mu.Lock()
	inc, known, inFlight := w.incarnation, w.state.Clone(), len(w.running)
	w.mu.Unlock()
	w.regMu.Unlock()

	wctx, cancelWrite := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancelWrite()
	st, err := repository.UpdateWorker(wctx, w.cfg.Store, w.cfg.ID, domain.OwnerWorker, w.cfg.ID, known, func(s *domain.Worker) (domain.Event, error) {
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
		ids := w.cancelAll(drainError{worker: w.cfg.ID, grace: grace})
		w.log.Warn("grace period over: stopping the runs still in flight and handing them back", "runs", len(ids), "executions", ids)
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
	_, err = repository.UpdateWorker(sctx, w.cfg.Store, w.cfg.ID, domain.OwnerWorker, w.cfg.ID, known, func(s *domain.Worker) (domain.Event, error) {
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
