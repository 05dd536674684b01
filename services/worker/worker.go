// Package worker runs a worker: it registers an incarnation in the log,
// keeps its lease (domain.Worker.Owe: a worker.heartbeat only while it holds
// runs or was handed one since it last wrote, and an idle worker writes
// nothing, it only reads its stream), takes the handoffs addressed to it from
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
	"github.com/turnstile/turnstile/internal/backoff"
	"github.com/turnstile/turnstile/internal/gopool"
	"github.com/turnstile/turnstile/internal/startstop"
	"github.com/turnstile/turnstile/services/bus"
	"github.com/turnstile/turnstile/services/clock"
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
	// MaxResultBytes bounds the result a run records: a run whose result
	// is larger fails, saying so, and a larger partial result or failure
	// result is left out. Default domain.DefaultMaxResultBytes; at most
	// domain.MaxResultBytesLimit.
	MaxResultBytes int
	Logger         *slog.Logger
	// Heartbeat is how often the worker looks at its lease: it writes a
	// worker.heartbeat if it owes one (see MarkEvery), else it reads its
	// stream to learn whether it was declared lost or replaced. Default 2s.
	Heartbeat time.Duration
	// MarkEvery is how long a debt of a sign of life may run before the
	// worker pays it with a worker.heartbeat: a debt starts when the worker
	// is handed a run while it owed nothing, and runs on from each heartbeat
	// while it holds runs. MarkEvery plus Heartbeat must stay well under the
	// executor's worker lease (the node uses a quarter of the lease).
	// Default twice Heartbeat (4s; the default lease is 15s).
	MarkEvery time.Duration
	// Clock tells the worker's time (its debts, MarkEvery). Default the
	// system clock.
	Clock clock.Clock
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
	case c.MarkEvery < 0:
		return fmt.Errorf("worker: MarkEvery %s is negative", c.MarkEvery)
	case c.MaxResultBytes < 1 || c.MaxResultBytes > domain.MaxResultBytesLimit:
		return fmt.Errorf("worker: MaxResultBytes %d must be 1..%d", c.MaxResultBytes, domain.MaxResultBytesLimit)
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
	owedSince   time.Time       // when (Clock) the incarnation began to owe the log a sign of life; zero: it owes none
	handedAt    time.Time       // when (Clock) the last handoff to the incarnation was accepted
	seenStart   uint64          // the live log's start at the last look that read past a trim (pastTrim)
	fenced      bool            // the store appends atomically to several streams: runs' writes carry a condition on the worker stream (see Run.guard)
	running     map[runKey]*runEntry
	draining    bool // set by Drain: no new handoff is taken
	stopped     bool
	superseded  chan struct{}  // closed when another process took this worker id
	supersedeBy string         // the incarnation that took it
	wg          sync.WaitGroup // runs in flight

	regMu sync.Mutex // serialises re-registrations

	runs *gopool.Pool // the goroutines that drive runs (see spawn); set by Start

	life startstop.Base // owns the router's and the heartbeats' goroutines (lifecycle.go)
	live bool           // Start succeeded: Drain has something to stop
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
	if cfg.MarkEvery == 0 {
		cfg.MarkEvery = 2 * cfg.Heartbeat
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
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
	if cfg.MaxResultBytes == 0 {
		cfg.MaxResultBytes = domain.DefaultMaxResultBytes
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
// A second Start does nothing.
func (w *Worker) Start(ctx context.Context) error {
	if w.cfg.Bus == nil {
		return errors.New("worker: Start needs a Bus")
	}
	ctx, ok := w.life.StartInit(ctx)
	if !ok {
		return nil
	}
	r, err := w.cfg.Bus.NewRouter()
	if err != nil {
		w.life.StartFailed()
		return err
	}
	r.AddConsumerHandler("handoff-"+w.cfg.ID, bus.HandoffTopic(w.cfg.ID), w.cfg.Bus.Subscriber, w.onHandoffs)
	r.AddConsumerHandler("cancel-"+w.cfg.ID, bus.TopicCancel, w.cfg.Bus.Subscriber, w.onCancel)
	w.router = r
	w.ctx = ctx
	w.runs = gopool.New(idleRunner, ctx.Done())
	w.life.Go(func() {
		if err := r.Run(ctx); err != nil {
			w.log.Error("router stopped", "err", err)
		}
	})
	select {
	case <-r.Running():
	case <-ctx.Done():
		err := ctx.Err()
		w.life.StartFailed()
		return err
	}
	if err := w.registerRetrying(ctx); err != nil {
		_ = r.Close()
		w.life.StartFailed()
		return err
	}
	w.mu.Lock()
	w.live = true
	w.mu.Unlock()
	w.life.Go(func() { w.heartbeats(ctx) })
	w.life.MarkStarted()
	return nil
}

// Register records the current incarnation in the log (worker.registered).
// Start does it; a simulation that drives the worker step by step calls it.
func (w *Worker) Register(ctx context.Context) error { return w.register(ctx) }

// registerRetrying registers, trying again while the store is unavailable.
func (w *Worker) registerRetrying(ctx context.Context) error {
	err := w.register(ctx)
	b := retryBackoff()
	for repository.Unavailable(err) && b.Tries() < maxTries && b.Wait(ctx) {
		err = w.register(ctx)
	}
	return err
}

// maxTries bounds how often the worker tries a write again while the store
// is unavailable (with pauses from 10ms doubling up to 1s, equal jitter:
// most of a minute).
const maxTries = 64

// retryBackoff is the pause between tries of a write.
func retryBackoff() backoff.Backoff {
	return backoff.Backoff{Min: 10 * time.Millisecond, Max: time.Second, Jitter: backoff.Equal}
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
		w.state, w.owedSince = st, time.Time{}
	}
	w.mu.Unlock()
	w.log.Info("registered", "incarnation", inc, "slots", w.cfg.Slots)
	return nil
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
	w.incarnation, w.state, w.owedSince = w.cfg.NewIncarnation(), nil, time.Time{}
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
	if !w.live || w.draining {
		w.mu.Unlock()
		return nil
	}
	w.draining = true
	w.mu.Unlock()
	if w.isSuperseded() {
		// Another process owns the id: write nothing, just let go.
		w.wg.Wait() // its runs were stopped and write nothing
		_ = w.router.Close()
		w.life.Stop()
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
	w.life.Stop()
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
