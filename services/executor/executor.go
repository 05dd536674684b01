package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/internal/gopool"
	"github.com/turnstile/turnstile/internal/startstop"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/aggregate"
	"github.com/turnstile/turnstile/services/clock"
	"github.com/turnstile/turnstile/services/crashpoint"
)

// Config configures an Executor. Zero fields take the defaults below.
type Config struct {
	Store  eventstore.Store
	Clock  clock.Clock
	Logger *slog.Logger
	// Name identifies this executor instance in the events it writes.
	Name string
	// Tick is how often time-based rules (handoff expiry, worker leases,
	// queue timeouts) are checked. Default 250ms.
	Tick time.Duration
	// WorkerLease is how long a worker may go without an event in the log
	// before it is declared lost. Default 15s.
	WorkerLease time.Duration
	// LoseWorkersAtStart declares every active worker lost once the fold has
	// caught up: right for `serve` on the embedded store, whose workers all
	// lived in the previous process.
	LoseWorkersAtStart bool
	// MaxBatch bounds the decisions written in one cycle. Default 4096.
	MaxBatch int
	// Standby starts the executor folding the log without deciding anything
	// until SetActive(true): a standby that keeps its fold current so that it
	// can take over at once when it gains the lease (see services/lease).
	Standby bool
	// Snapshots, if set, keeps snapshots of the executor's fold: Start
	// resumes from the saved one when it matches the log (else it folds from
	// the beginning), and a new one is saved every SnapshotEvery events
	// (default 500,000) and when the executor stops.
	Snapshots     *projections.SnapshotFiles
	SnapshotEvery uint64
}

func (c *Config) setDefaults() {
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Name == "" {
		c.Name = "executor"
	}
	if c.Tick == 0 {
		c.Tick = 250 * time.Millisecond
	}
	if c.WorkerLease == 0 {
		c.WorkerLease = 15 * time.Second
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 4096
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = 500_000
	}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("executor: Store is required")
	case c.Tick < time.Millisecond:
		return fmt.Errorf("executor: Tick %s is below 1ms", c.Tick)
	case c.WorkerLease < 10*time.Millisecond:
		return fmt.Errorf("executor: WorkerLease %s is below 10ms", c.WorkerLease)
	case c.MaxBatch < 1:
		return fmt.Errorf("executor: MaxBatch %d < 1", c.MaxBatch)
	}
	return nil
}

// Executor folds the log and writes the executor's decisions. Start it once;
// Stop ends it.
type Executor struct {
	cfg   Config
	log   *slog.Logger
	state *projections.State

	// awaiting holds, per stream, the version this executor wrote and has
	// not yet seen in its fold; no decision touches such a stream meanwhile.
	awaiting map[string]uint64
	// single is set when the store cannot append to several streams
	// atomically: each op is then written one stream at a time (see the
	// package documentation).
	single bool

	// pending remembers, for each partial write the fold shows (a grant
	// without its handoff, announced children or action changes not yet
	// written), since which timed cycle it has been seen; sweep is the
	// current decision's generation, and timedSweeps counts the timed ones.
	pending     map[string]*seen
	sweep       int64
	timedSweeps int64

	// handing holds, per execution stream, a handoff this executor wrote
	// (or tried to: the outcome may be unknown) and has not yet seen in its
	// fold. A worker named there is not declared lost meanwhile: the lost
	// verdict's append must abandon every execution the worker holds, and
	// the fold does not show this one yet.
	handing map[string]handoff

	// doubted holds, per worker stream, the version a lost verdict of this
	// executor would have reached when its append failed with an unknown
	// outcome (such as a timeout after the store executed it). Until the
	// fold shows that version, written by the verdict or by the worker, the
	// worker gets no handoff: one decided on a fold that lacks a verdict
	// already in the log would hand work to a lost incarnation.
	doubted map[string]uint64

	// beforeAppend, if set (tests only), is called before each op is appended.
	beforeAppend func(what string)

	// lastID is the id of the event at state.Next-1, and snapshotAt the
	// position of the last snapshot saved or loaded (loop only).
	lastID     string
	snapshotAt uint64
	snapshots  sync.WaitGroup // snapshot saves under way
	saving     atomic.Bool    // a periodic save is under way

	ready    atomic.Bool
	readied  startstop.Signal // closed with ready (lifecycle.go)
	active   atomic.Bool
	wakeup   chan struct{} // buffered: SetActive(true) asks for a decision cycle
	position atomic.Uint64
	cancel   context.CancelFunc
	done     chan struct{}
	mu       sync.Mutex // guards state for readers outside the loop (Inspect)

	// Stats counts decisions, for metrics and tests.
	Stats Stats
}

// Stats counts what the executor wrote and what it lost to other writers.
type Stats struct {
	Grants, Rejections, Expiries, Abandons, Cancels, Failures, Conflicts atomic.Int64
	LostWorkers, Children, ParentsEnded                                  atomic.Int64
	// Undecodable counts the events the fold passed over because they did
	// not decode (logged one by one; the audit reports them).
	Undecodable atomic.Int64
	// Repairs counts the single-stream writes this executor completed from
	// the log: handoffs of grants, children of announced fan-outs and
	// announced action changes whose writer stopped before writing them.
	Repairs atomic.Int64
	// TimedCycles counts the cycles that checked the time-based rules, each
	// counted once its decisions, and those of every earlier cycle, have
	// been appended (or refused).
	TimedCycles atomic.Int64
}

// New returns an executor; it does nothing until Start.
func New(cfg Config) (*Executor, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Executor{cfg: cfg, log: cfg.Logger.With("component", "executor", "name", cfg.Name),
		state: projections.NewState(), awaiting: map[string]uint64{}, handing: map[string]handoff{}, doubted: map[string]uint64{}, wakeup: make(chan struct{}, 1),
		single: !eventstore.AtomicMultiStream(cfg.Store), pending: map[string]*seen{}}
	e.active.Store(!cfg.Standby)
	return e, nil
}

// SetActive switches the executor between deciding (active) and only
// folding the log (standby). A standby writes nothing, so any number of
// them may follow one log; at most one should be active at a time (a lease
// says which), and if two ever are, the expected versions on the queue and
// execution streams still let only one of two racing decisions commit.
// Appends already under way when it goes standby finish, fenced as ever.
func (e *Executor) SetActive(active bool) {
	if e.active.Swap(active) == active || !active {
		return
	}
	select {
	case e.wakeup <- struct{}{}:
	default:
	}
}

// Active reports whether the executor decides (see SetActive).
func (e *Executor) Active() bool { return e.active.Load() }

// Start folds the log from the beginning and then follows it, deciding as it
// goes. It returns at once; the work runs until Stop or ctx ends. A failed
// read of the log (the head, or the subscription) is retried, from where the
// fold stopped, until ctx ends or the store is closed.
func (e *Executor) Start(ctx context.Context) error {
	e.loadSnapshot(ctx)
	from := e.state.Next
	ctx, e.cancel = context.WithCancel(ctx)
	e.done = make(chan struct{})
	batches := make(chan []domain.Envelope, 64)
	heads := make(chan uint64, 1)
	subErr := make(chan error, 1)
	go func() {
		head, err := e.readHead(ctx)
		if err != nil {
			subErr <- err
			return
		}
		heads <- head
		subErr <- e.follow(ctx, from, batches)
	}()
	go e.loop(ctx, heads, batches, subErr)
	return nil
}

// retryPause is how long the executor waits before reading the log again
// after a failed read: it doubles from the first value up to the second.
var retryPause = [2]time.Duration{10 * time.Millisecond, time.Second}

// readHead reads the log's head, trying again after a failure until ctx
// ends or the store is closed.
func (e *Executor) readHead(ctx context.Context) (uint64, error) {
	pause := retryPause[0]
	for {
		head, err := e.cfg.Store.Head(ctx)
		if err == nil {
			return head, nil
		}
		if ctx.Err() != nil || errors.Is(err, eventstore.ErrClosed) {
			return 0, fmt.Errorf("executor: read head: %w", err)
		}
		e.log.Warn("cannot read the log's head; trying again", "err", err, "in", pause)
		if !sleep(ctx, pause) {
			return 0, ctx.Err()
		}
		pause = min(2*pause, retryPause[1])
	}
}

// follow subscribes to the log from position from and sends what it delivers
// to batches; when the subscription fails, it subscribes again from the
// position after the last batch sent. It returns when ctx ends or the store
// is closed.
func (e *Executor) follow(ctx context.Context, from uint64, batches chan<- []domain.Envelope) error {
	next, pause := from, retryPause[0]
	for {
		err := e.cfg.Store.Subscribe(ctx, next, eventstore.Filter{}, func(b []domain.Envelope) error {
			select {
			case batches <- b: // the handler's to keep (eventstore.Store)
				next, pause = b[len(b)-1].Position+1, retryPause[0]
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		if ctx.Err() != nil || errors.Is(err, eventstore.ErrClosed) {
			return err
		}
		e.log.Warn("log subscription failed; subscribing again", "from", next, "err", err, "in", pause)
		if !sleep(ctx, pause) {
			return ctx.Err()
		}
		pause = min(2*pause, retryPause[1])
	}
}

// sleep waits for d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Stop ends the executor and waits for its loop to return, then saves a
// snapshot of its fold (when Config.Snapshots is set).
func (e *Executor) Stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	<-e.done
	if e.state.Next != e.snapshotAt {
		e.saveSnapshot()
	}
	e.snapshots.Wait()
}

const snapshotName = "executor-state"

// loadSnapshot replaces the empty fold with the saved snapshot, if there is
// one that matches the log.
func (e *Executor) loadSnapshot(ctx context.Context) {
	if e.cfg.Snapshots == nil {
		return
	}
	start := time.Now()
	var sn projections.StateSnapshot
	ok, err := e.cfg.Snapshots.Load(ctx, e.cfg.Store, snapshotName, &sn)
	switch {
	case err != nil:
		e.log.Warn("not using the snapshot: folding the log from the beginning", "err", err)
	case ok:
		e.state = projections.RestoreState(&sn)
		e.snapshotAt = sn.Next
		e.log.Info("resumed from a snapshot", "position", sn.Next, "live", len(sn.Executions), "took", time.Since(start))
	}
}

// saveSnapshot saves the fold as it is now; the encoding and the write run
// in the background (the snapshot shares nothing that the fold changes).
func (e *Executor) saveSnapshot() {
	if e.cfg.Snapshots == nil || e.lastID == "" {
		return
	}
	e.mu.Lock()
	sn, lastID := e.state.Snapshot(), e.lastID
	e.mu.Unlock()
	e.snapshotAt = sn.Next
	e.snapshots.Add(1)
	e.saving.Store(true)
	go func() {
		defer e.snapshots.Done()
		defer e.saving.Store(false)
		start := time.Now()
		if err := e.cfg.Snapshots.Save(snapshotName, sn.Next, lastID, sn); err != nil {
			e.log.Warn("cannot save a snapshot", "err", err)
			return
		}
		e.log.Debug("saved a snapshot", "position", sn.Next, "took", time.Since(start))
	}()
}

// Done is closed when the executor's loop has returned: after Stop, or when
// its log subscription failed (logged), after which it decides nothing more.
func (e *Executor) Done() <-chan struct{} { return e.done }

// Ready reports whether the fold has caught up with the log as it was at Start.
func (e *Executor) Ready() bool { return e.ready.Load() }

// Position returns the position after the last event folded.
func (e *Executor) Position() uint64 { return e.position.Load() }

// Inspect calls fn with the executor's fold, under its lock. fn must not keep it.
func (e *Executor) Inspect(fn func(*projections.State)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fn(e.state)
}

func (e *Executor) loop(ctx context.Context, heads <-chan uint64, batches <-chan []domain.Envelope, subErr <-chan error) {
	defer close(e.done)
	var head uint64
	select {
	case <-ctx.Done():
		return
	case err := <-subErr:
		if ctx.Err() == nil {
			e.log.Error("cannot read the log", "err", err)
		}
		return
	case head = <-heads:
	}
	tick := time.NewTicker(e.cfg.Tick)
	defer tick.Stop()
	// Decisions are appended in the background while the loop goes on
	// folding and deciding (see runAsync); before it returns, the loop waits
	// for the appends under way and records their outcomes.
	stopWriters := make(chan struct{})
	fl := &flight{results: make(chan opResult, 64), writers: gopool.New(time.Second, stopWriters)}
	defer fl.writers.Wait()
	defer close(stopWriters) // after land: no append is under way any more
	defer e.land(ctx, fl)
	if head == 0 {
		e.markReady() // an empty log: no worker of a previous run to lose
	} else if e.active.Load() && e.state.Next >= head && e.becomeReady(ctx, head) { // a snapshot at the log's end
		e.run(ctx, e.Decide(true))
	}
	for {
		timed := false
		select {
		case <-ctx.Done():
			return
		case err := <-subErr:
			if ctx.Err() == nil {
				e.log.Error("log subscription ended", "err", err)
			}
			return
		case r := <-fl.results:
			if !e.settled(ctx, fl, r) {
				continue // it landed: the fold shows it, and the next batch decides
			}
		case b := <-batches:
			e.apply(b)
		drain:
			for len(batches) > 0 { // fold everything already delivered before deciding
				select {
				case b := <-batches:
					e.apply(b)
				default:
					break drain
				}
			}
		case <-tick.C:
			timed = true
		case <-e.wakeup:
			timed = true // a new active executor checks the time-based rules at once
		}
		if e.cfg.Snapshots != nil && e.state.Next-e.snapshotAt >= e.cfg.SnapshotEvery && !e.saving.Load() {
			e.saveSnapshot()
		}
		if !e.active.Load() {
			if !e.ready.Load() && e.state.Next >= head {
				e.markReady()
				e.log.Info("caught up with the log (standby: folding, not deciding)", "position", e.state.Next)
			}
			continue
		}
		if !e.ready.Load() && !e.becomeReady(ctx, head) {
			continue
		}
		if len(fl.cycles) >= maxCyclesInFlight {
			if timed {
				fl.timedWaiting = true // decide it once a cycle has landed
			}
			continue
		}
		timed = timed || fl.timedWaiting
		fl.timedWaiting = false
		e.runAsync(ctx, fl, e.Decide(timed), timed)
	}
}

// maxCyclesInFlight bounds the decision cycles whose appends are under way
// at once; at the bound the loop folds without deciding until one lands.
const maxCyclesInFlight = 8

// flight is the loop's record of the decision cycles whose appends are
// under way, oldest first.
type flight struct {
	cycles       []*cycle
	results      chan opResult
	writers      *gopool.Pool // the goroutines that append them (kept: each grew its stack)
	timedWaiting bool         // a timed cycle is owed (it was due at the bound)
}

// cycle is one Decide's decisions, appended in the background.
type cycle struct {
	timed bool
	left  int // appends not yet settled
}

// opResult is the outcome of one decision's appends.
type opResult struct {
	c      *cycle
	d      *Decision
	w      written
	landed map[string]bool
}

// runAsync appends a cycle's decisions concurrently in the background (the
// store commits them together); each outcome comes back to the loop on
// fl.results. The streams they write stay awaited meanwhile, so the loop's
// later decisions leave them alone: decisions of successive cycles are as
// independent as those of one cycle, which Decide already allows to commit
// in any order.
func (e *Executor) runAsync(ctx context.Context, fl *flight, ds []Decision, timed bool) {
	if len(ds) == 0 && !timed {
		return
	}
	c := &cycle{timed: timed, left: len(ds)}
	fl.cycles = append(fl.cycles, c)
	if len(ds) == 0 {
		e.retire(fl)
		return
	}
	for i := range ds {
		d := &ds[i]
		fl.writers.Go(func() {
			if e.beforeAppend != nil {
				e.beforeAppend(d.o.what)
			}
			w := e.write(ctx, &d.o)
			if w.err == nil {
				crashAfter(&d.o)
			}
			fl.results <- opResult{c: c, d: d, w: w, landed: e.landed(ctx, &d.o, w)}
		})
	}
}

// settled records one decision's outcome and reports whether it failed
// (its streams are free again, so deciding again may help).
func (e *Executor) settled(ctx context.Context, fl *flight, r opResult) bool {
	e.mu.Lock()
	e.settle(ctx, &r.d.o, r.w, r.landed)
	e.mu.Unlock()
	r.c.left--
	e.retire(fl)
	return r.w.err != nil
}

// retire drops the cycles at the front of fl that have landed, counting the
// timed ones: a timed cycle counts once it and every cycle before it have
// been appended (or refused).
func (e *Executor) retire(fl *flight) {
	for len(fl.cycles) > 0 && fl.cycles[0].left == 0 {
		if fl.cycles[0].timed {
			e.Stats.TimedCycles.Add(1)
		}
		fl.cycles[0] = nil
		fl.cycles = fl.cycles[1:]
	}
}

// land waits for every append under way and records its outcome.
func (e *Executor) land(ctx context.Context, fl *flight) {
	for len(fl.cycles) > 0 {
		e.settled(ctx, fl, <-fl.results)
	}
}

// becomeReady reports whether the fold has reached head, the log's end at
// Start. The first time it has, it declares the previous run's workers lost
// before saying it is ready, so that no worker of this run, which registers
// after Ready, is taken for one of them.
func (e *Executor) becomeReady(ctx context.Context, head uint64) bool {
	if e.state.Next < head {
		return false
	}
	e.run(ctx, e.DecideAtStart())
	e.markReady()
	e.log.Info("caught up with the log", "position", e.state.Next)
	return true
}

// Fold folds a batch of the log's events, in position order, into the
// executor's state. Start's loop calls it with what its subscription
// delivers; a simulation that drives the executor step by step (without
// Start) calls it itself. Events already folded are skipped.
func (e *Executor) Fold(batch []domain.Envelope) { e.apply(batch) }

func (e *Executor) apply(batch []domain.Envelope) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range batch {
		env := &batch[i]
		if err := e.state.Apply(env); err != nil {
			// An event this build cannot read is skipped, loudly: the audit reports it.
			e.log.Error("cannot fold event", "position", env.Position, "stream", env.Stream, "err", err)
			e.state.Next = env.Position + 1
			e.Stats.Undecodable.Add(1)
		}
		if v, ok := e.awaiting[env.Stream]; ok && env.Version >= v {
			delete(e.awaiting, env.Stream)
		}
		if h, ok := e.handing[env.Stream]; ok && env.Version >= h.version {
			delete(e.handing, env.Stream)
		}
		if v, ok := e.doubted[env.Stream]; ok && env.Version >= v {
			delete(e.doubted, env.Stream)
		}
	}
	if n := len(batch); n > 0 && batch[n-1].Position+1 == e.state.Next {
		e.lastID = batch[n-1].ID.String()
	}
	e.position.Store(e.state.Next)
}

// handoff is a handoff to worker, the last event of its append at version.
type handoff struct {
	worker  string
	version uint64
}

// op is one decision of the executor: one atomic append, or, on a store
// without atomic multi-stream appends, appends to one stream at a time in
// the order given, the first being the fence (see seqKind).
type op struct {
	what     string
	appends  []eventstore.StreamAppend
	count    *atomic.Int64
	n        int  // how many decisions count adds (0 means 1)
	takeBack bool // it takes executions back from a worker (or declares one lost)
	grants   bool // it grants slots or hands executions to workers
	seq      seqKind
	key      int // index of the append whose landing makes the decision count
}

// seqKind says how an op's appends are written one stream at a time. The
// first append is always the fence: if it fails, nothing else is written.
type seqKind uint8

const (
	// seqChain: in order, stopping at the first failure.
	seqChain seqKind = iota
	// seqEach: after the fence, every append whatever the others did (they
	// are independent: each grant's handoff).
	seqEach
	// seqChainPastRaces: in order, going on past an append that lost a race
	// (its stream was written by someone else: a child another executor
	// requested) and stopping at any other failure.
	seqChainPastRaces
)

// written is the outcome of an op's appends: each one's error (nil: it
// landed; errNotTried: it was not attempted, the chain having stopped
// before it), and the first error.
type written struct {
	errs []error
	err  error
}

// errNotTried marks an append of a single-stream op that was not attempted.
var errNotTried = errors.New("not attempted: an earlier append of the op failed")

// write appends o: atomically when the store can, else one stream at a
// time as o.seq says.
func (e *Executor) write(ctx context.Context, o *op) written {
	for i := range o.appends { // decoded here, off the loop, for the folds of this process
		for j := range o.appends[i].Events {
			_ = domain.Catalogue.Remember(&o.appends[i].Events[j])
		}
	}
	w := written{errs: make([]error, len(o.appends))}
	all := func(err error) written {
		for i := range w.errs {
			w.errs[i] = err
		}
		w.err = err
		return w
	}
	switch {
	case len(o.appends) == 1:
		a := &o.appends[0]
		_, err := e.cfg.Store.Append(ctx, a.Stream, a.Expected, a.Events...)
		return all(err)
	case !e.single:
		_, err := e.cfg.Store.AppendMulti(ctx, o.appends...)
		return all(err)
	}
	for i := range o.appends {
		a := &o.appends[i]
		_, err := e.cfg.Store.Append(ctx, a.Stream, a.Expected, a.Events...)
		if err == nil {
			continue
		}
		w.errs[i] = err
		if w.err == nil {
			w.err = err
		}
		switch {
		case i > 0 && o.seq == seqEach:
		case i > 0 && o.seq == seqChainPastRaces && aggregate.LostRace(err):
		default:
			for j := i + 1; j < len(o.appends); j++ {
				w.errs[j] = errNotTried
			}
			return w
		}
	}
	return w
}

func (e *Executor) busy(stream string) bool {
	_, ok := e.awaiting[stream]
	return ok
}

// Decision is one decision the executor took on its fold: one atomic
// append, or on a store without atomic multi-stream appends, its appends
// one stream at a time, the fence first. Commit appends it.
type Decision struct{ o op }

// What describes the decision, such as "grant demo.sleep" or "expire <id>".
func (d Decision) What() string { return d.o.what }

// DecideAtStart returns what to write once the fold has caught up with the
// log as it was at start, before deciding anything else: with
// LoseWorkersAtStart, the lost verdicts of the previous run's workers.
func (e *Executor) DecideAtStart() []Decision {
	e.mu.Lock()
	defer e.mu.Unlock()
	return wrap(e.decideLostAtStart(nil))
}

// Decide returns one cycle's decisions on the fold as it is now; timed adds
// the rules that depend on the clock alone (worker leases, queue timeouts,
// handoff expiries). The streams a decision writes stay untouched by later
// decisions until the fold shows its events or Commit reports its failure,
// so the decisions of one cycle may be committed in any order.
func (e *Executor) Decide(timed bool) []Decision {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.cfg.Clock.Now()
	e.sweep++
	if timed {
		e.timedSweeps++
	}
	var ops []op
	ops = e.decideAnnounced(ops)
	ops = e.decideRejections(ops)
	if timed {
		ops = e.decideLeases(ops, now)
		ops = e.decideQueueTimeouts(ops, now)
	}
	ops = e.decideExpiries(ops, now, timed)
	if len(e.state.Attention) > 0 {
		attention := sortedKeys(e.state.Attention)
		ops = e.decideAttention(ops, attention)
		ops = e.decideParents(ops, attention)
	}
	ops = e.decideGrants(ops, now)
	for k, p := range e.pending { // forget partial writes the fold no longer shows
		if p.touched != e.sweep {
			delete(e.pending, k)
		}
	}
	return wrap(ops)
}

func wrap(ops []op) []Decision {
	out := make([]Decision, len(ops))
	for i := range ops {
		out[i] = Decision{ops[i]}
	}
	return out
}

// Commit appends one decision and records the outcome: the decision's count
// on success; on failure, its streams are free for the next decisions. It
// returns the store's error (on a store without atomic multi-stream appends,
// the first of its appends' errors: the appends before it, the fence first,
// may have landed, and the fold shows what is missing). A lost race
// (aggregate.LostRace) is expected and harmless: the fold shows the winner's
// events and the next cycle decides again. So is any other failure: the ids
// of a decision's events are derived from what it decides, so deciding it
// again on a fold that already shows it writes nothing twice.
func (e *Executor) Commit(ctx context.Context, d Decision) error {
	if e.beforeAppend != nil {
		e.beforeAppend(d.o.what)
	}
	w := e.write(ctx, &d.o)
	landed := e.landed(ctx, &d.o, w)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settle(ctx, &d.o, w, landed)
	return w.err
}

// landed, after appends failed with an unknown outcome, reads whether they
// landed: per stream, false when the stream has no event at the version the
// append would have reached, true when it has one (ours, or a winner's: the
// fold will show it either way), absent when that is still unknown.
func (e *Executor) landed(ctx context.Context, o *op, w written) map[string]bool {
	if w.err == nil || ctx.Err() != nil {
		return nil
	}
	var out map[string]bool
	for i, a := range o.appends {
		if err := w.errs[i]; err == nil || errors.Is(err, errNotTried) || aggregate.LostRace(err) {
			continue // landed, or known not to have landed
		}
		e.mu.Lock()
		v, ok := e.awaiting[a.Stream]
		e.mu.Unlock()
		if !ok {
			continue // the fold has shown it meanwhile
		}
		evs, rerr := e.cfg.Store.ReadStream(ctx, a.Stream, v, 1)
		if rerr == nil || errors.Is(rerr, eventstore.ErrStreamNotFound) {
			if out == nil {
				out = map[string]bool{}
			}
			out[a.Stream] = len(evs) > 0
		}
	}
	return out
}

// run appends the decisions concurrently (the store commits them together)
// and waits for all.
func (e *Executor) run(ctx context.Context, ds []Decision) {
	if len(ds) == 0 {
		return
	}
	res := make([]written, len(ds))
	var wg sync.WaitGroup
	for i := range ds {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if e.beforeAppend != nil {
				e.beforeAppend(ds[i].o.what)
			}
			res[i] = e.write(ctx, &ds[i].o)
			if res[i].err == nil {
				crashAfter(&ds[i].o)
			}
		}(i)
	}
	wg.Wait()
	landed := make([]map[string]bool, len(ds))
	for i, w := range res {
		landed[i] = e.landed(ctx, &ds[i].o, w)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, w := range res {
		e.settle(ctx, &ds[i].o, w, landed[i])
	}
}

// settle records the outcome of one op's appends; landed says, after a
// failure, which of its handoffs are known to have landed or not. e.mu must
// be held.
func (e *Executor) settle(ctx context.Context, o *op, w written, landed map[string]bool) {
	if w.errs[o.key] == nil && o.count != nil {
		o.count.Add(int64(max(o.n, 1)))
	}
	if w.err == nil {
		return
	}
	for i, a := range o.appends {
		err := w.errs[i]
		in, known := landed[a.Stream]
		if err == nil || (known && in) {
			continue // it will show up in the fold
		}
		// It will not (or whether it will is unknown: then, as after a lost
		// race, the decision is taken again on the fold, and its ids make a
		// landed twin an idempotent replay).
		notLanded := errors.Is(err, errNotTried) || aggregate.LostRace(err) || known
		if cat, _ := domain.SplitStream(a.Stream); o.takeBack && !notLanded && cat == domain.StreamWorker {
			e.doubted[a.Stream] = e.awaiting[a.Stream] // a lost verdict that may have landed
		}
		delete(e.awaiting, a.Stream)
		if notLanded {
			delete(e.handing, a.Stream) // it did not land
		}
	}
	if w.errs[0] == nil {
		// A single-stream op cut short after its fence: the fold shows what
		// is missing, and the next cycles complete it.
		if aggregate.LostRace(w.err) {
			e.Stats.Conflicts.Add(1)
		}
		if ctx.Err() == nil {
			e.log.Info("an op's appends after its fence did not all land; the log says what is missing", "op", o.what, "err", w.err)
		}
		return
	}
	err := w.err
	if aggregate.LostRace(err) {
		e.Stats.Conflicts.Add(1)
		if o.takeBack {
			// A worker (or another executor) wrote first: the log has
			// decided, and the next cycle decides on what it says.
			e.log.Info("lost a race for a take-back; the log decided otherwise", "op", o.what, "err", err)
		} else {
			e.log.Debug("lost a race, deciding again", "op", o.what, "err", err)
		}
		return
	}
	if ctx.Err() == nil {
		e.log.Warn("append failed; the next cycle decides again", "op", o.what, "err", err)
	}
}

// crashAfter passes the crash points of a committed op (see crashpoint).
func crashAfter(o *op) {
	crashpoint.Hit(crashpoint.ExecutorAppended)
	switch {
	case o.grants:
		crashpoint.Hit(crashpoint.ExecutorGranted)
	case o.takeBack:
		crashpoint.Hit(crashpoint.ExecutorTakenBack)
	}
}

// stage builds one stream's part of an op and marks the stream awaited.
// Its events' ids derive from this executor, the stream and the version.
func (e *Executor) stage(stream string, version int64, events ...domain.Event) eventstore.StreamAppend {
	return e.stageIDs(stream, version, func(i int, typ string) uuid.UUID {
		return aggregate.EventID(e.cfg.Name, stream, version+1+int64(i), typ)
	}, events...)
}

// stageAfter is stage for an append that follows the fence event fence:
// its ids derive from fence's id, so whoever completes it from the log
// (this executor after a restart, or another) writes the same ids.
func (e *Executor) stageAfter(fence uuid.UUID, stream string, version int64, events ...domain.Event) eventstore.StreamAppend {
	return e.stageIDs(stream, version, func(i int, typ string) uuid.UUID { return followID(fence, stream, i, typ) }, events...)
}

// followID is the id of the i-th event of type typ that an op writes to
// stream after its fence event fence.
func followID(fence uuid.UUID, stream string, i int, typ string) uuid.UUID {
	// The bytes of fmt's "%s/%d/%s", without fmt: ids must never change.
	var buf [128]byte
	b := strconv.AppendInt(append(append(buf[:0], stream...), '/'), int64(i), 10)
	return domain.LocalEventID(domain.DeriveID(fence, append(append(b, '/'), typ...)), stream)
}

func (e *Executor) stageIDs(stream string, version int64, id func(i int, typ string) uuid.UUID, events ...domain.Event) eventstore.StreamAppend {
	a := eventstore.StreamAppend{Stream: stream, Expected: aggregate.Expected(version)}
	for i, ev := range events {
		env, err := domain.Catalogue.Encode(id(i, ev.EventType()), ev, domain.OwnerExecutor, e.cfg.Name)
		if err != nil {
			panic(fmt.Sprintf("executor: encode %s: %v", ev.EventType(), err)) // our own events always encode
		}
		a.Events = append(a.Events, env)
	}
	e.awaiting[stream] = uint64(version + int64(len(events)))
	return a
}

func (e *Executor) decideRejections(ops []op) []op {
	for _, r := range e.state.Queues.PendingRejections() {
		if len(ops) >= e.cfg.MaxBatch {
			break
		}
		x := e.state.Execution(r.Execution)
		stream := domain.ExecutionStream(r.Execution)
		if x == nil || e.busy(stream) {
			continue
		}
		ev, err := x.Reject(r.Code, r.Reason)
		if err != nil {
			continue
		}
		ops = append(ops, op{what: "reject " + r.Execution, count: &e.Stats.Rejections,
			appends: []eventstore.StreamAppend{e.stage(stream, x.Version(), ev)}})
	}
	return ops
}

// rateMargin is how much earlier than its clock the executor judges the
// rate limit. The audit judges a grant at its commit time, which must not be
// before the decision's time; a store that rounds commit times down (the
// embedded store keeps microseconds) could otherwise put a grant a fraction
// of a microsecond before the window allowed it. Judging earlier only ever
// allows fewer grants.
const rateMargin = time.Millisecond

// decideGrants grants the heads of the queues, oldest request first across
// all queues, while workers have free slots, each with its handoff in the
// same atomic append as the grant (on a store without atomic multi-stream
// appends: after it, see seqEach). First it completes the handoffs of grants
// the log shows without one. A queue with an announced action change not yet
// in the action stream grants nothing.
func (e *Executor) decideGrants(ops []op, now time.Time) []op {
	workers := e.freeWorkers()
	if len(workers) == 0 {
		return ops
	}
	ops = e.decideUnscheduled(ops, workers)
	free := 0
	for _, w := range workers {
		free += w.free
	}
	type cand struct {
		q *domain.Queue
		w domain.Waiter
	}
	var cands []cand
	for _, ref := range e.state.Queues.Refs() {
		q := e.state.Queues.Get(ref)
		if _, announced := e.state.Announced[ref]; announced || q.Waiting() == 0 || e.busy(domain.QueueStream(ref)) {
			continue
		}
		for _, w := range q.Grantable(free, now.Add(-rateMargin)) {
			cands = append(cands, cand{q, w})
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].w.Position < cands[j].w.Position })
	perQueue := map[string]*op{}
	var order []string
	qVersion := map[string]int64{}
	// A waiter that cannot be granted now (its stream awaits one of our
	// writes, such as its queue timeout or cancellation in this very cycle,
	// or no worker runs its action) holds back everyone behind it in its
	// key's queue: granting past it could commit before it leaves the queue
	// (or if its own write failed), out of FIFO order.
	blocked := map[[2]string]bool{}
	for _, c := range cands {
		if free == 0 || len(ops)+len(perQueue) >= e.cfg.MaxBatch {
			break
		}
		qk := [2]string{c.q.Ref, c.w.Key}
		if blocked[qk] {
			continue
		}
		blocked[qk] = true // unless granted below
		x := e.state.Execution(c.w.Execution)
		xs := domain.ExecutionStream(c.w.Execution)
		if x == nil || e.busy(xs) {
			continue
		}
		p := c.q.Policy()
		wk := pickWorker(workers, p.Runner)
		if wk == nil {
			continue
		}
		grant, err := x.Grant(c.w.Key)
		if err != nil {
			continue
		}
		// The handoff follows the grant in the same append; decide it on the
		// state the grant leads to.
		next := *x
		next.Apply(grant, uint64(x.Version()+1), time.Time{})
		sched, err := next.Schedule(wk.id, wk.incarnation, p)
		if err != nil {
			continue
		}
		blocked[qk] = false
		o := perQueue[c.q.Ref]
		if o == nil {
			o = &op{what: "grant " + c.q.Ref, count: &e.Stats.Grants, grants: true, seq: seqEach}
			perQueue[c.q.Ref] = o
			order = append(order, c.q.Ref)
			qVersion[c.q.Ref] = c.q.Version()
		}
		fence := e.queueGrant(o, c.q.Ref, qVersion, domain.QueueGranted{Execution: c.w.Execution, ConcurrencyKey: c.w.Key})
		o.appends = append(o.appends, e.stageAfter(fence, xs, x.Version(), grant, sched))
		e.handing[xs] = handoff{worker: wk.id, version: uint64(x.Version() + 2)}
		o.n++
		wk.free--
		free--
	}
	for _, ref := range order {
		o := perQueue[ref]
		ops = append(ops, *o)
	}
	return ops
}

// queueGrant adds a queue.granted event to the op's queue-stream append,
// creating it (fenced on the queue's version) on first use, and returns the
// event's id.
func (e *Executor) queueGrant(o *op, ref string, qVersion map[string]int64, g domain.QueueGranted) uuid.UUID {
	qs := domain.QueueStream(ref)
	for i := range o.appends {
		if o.appends[i].Stream == qs {
			a := &o.appends[i]
			v := qVersion[ref] + int64(len(a.Events)) + 1
			env, _ := domain.Catalogue.Encode(aggregate.EventID(e.cfg.Name, qs, v, g.EventType()), g, domain.OwnerExecutor, e.cfg.Name)
			a.Events = append(a.Events, env)
			e.awaiting[qs] = uint64(v)
			return env.ID
		}
	}
	a := e.stage(qs, qVersion[ref], g)
	o.appends = append([]eventstore.StreamAppend{a}, o.appends...)
	return a.Events[0].ID
}

// seen is how long a partial write has been in the fold.
type seen struct {
	since   int64 // timedSweeps when first seen
	touched int64 // the decision generation that last saw it
}

// ripe reports whether the partial write key has been in the fold for two
// timed cycles, so that its writer (another executor, or the API, still at
// work) had time to finish it before this executor completes it.
func (e *Executor) ripe(key string) bool {
	now := e.timedSweeps
	p := e.pending[key]
	if p == nil {
		p = &seen{since: now}
		e.pending[key] = p
	}
	p.touched = e.sweep
	return now >= p.since+2
}

// decideUnscheduled completes grants whose handoff the log does not show
// (a single-stream grant cut short after its queue.granted): the
// execution's execution.scheduling and execution.scheduled, at its current
// version, with ids derived from the grant's. An execution asked to cancel
// is left to decideAttention, which ends it and frees the slot.
func (e *Executor) decideUnscheduled(ops []op, workers []*freeWorker) []op {
	for _, id := range sortedKeys(e.state.Unscheduled) {
		if len(ops) >= e.cfg.MaxBatch {
			break
		}
		x := e.state.Execution(id)
		xs := domain.ExecutionStream(id)
		if x == nil || x.CancelRequested() || e.busy(xs) || !e.ripe("grant "+id) {
			continue
		}
		ref, key, _, ok := e.state.Queues.Locate(id)
		q := e.state.Queues.Get(ref)
		if !ok || q == nil {
			continue
		}
		p := q.Policy()
		wk := pickWorker(workers, p.Runner)
		if wk == nil {
			continue
		}
		grant, err := x.Grant(key)
		if err != nil {
			continue
		}
		next := *x
		next.Apply(grant, uint64(x.Version()+1), time.Time{})
		sched, err := next.Schedule(wk.id, wk.incarnation, p)
		if err != nil {
			continue
		}
		wk.free--
		e.handing[xs] = handoff{worker: wk.id, version: uint64(x.Version() + 2)}
		ops = append(ops, op{what: "hand over " + id, count: &e.Stats.Repairs,
			appends: []eventstore.StreamAppend{e.stageAfter(e.state.Unscheduled[id], xs, x.Version(), grant, sched)}})
	}
	return ops
}

// decideAnnounced completes action changes announced on their queue stream
// (by Commands on a store without atomic multi-stream appends) whose action
// event is not in the log: it appends the announced event as it was
// prepared (same id, same writer), so if its writer's own append lands too,
// one of them is an idempotent replay of the other.
func (e *Executor) decideAnnounced(ops []op) []op {
	for _, ref := range sortedKeys(e.state.Announced) {
		an := e.state.Announced[ref]
		as := domain.ActionStream(ref)
		if e.busy(as) || !e.ripe("action "+ref) {
			continue
		}
		if spec, ok := domain.Catalogue.Spec(an.Event.Type); !ok || spec.Stream != domain.StreamAction ||
			an.Event.ID == (uuid.UUID{}) || an.Event.Owner != domain.OwnerAPI {
			e.log.Error("cannot complete an announced action change: the announcement does not carry a usable event",
				"action", ref, "position", an.Position)
			continue
		}
		env := an.Event
		env.Stream, env.Version, env.Position, env.Time = "", 0, 0, time.Time{}
		e.awaiting[as] = an.ActionVersion
		ops = append(ops, op{what: "complete action change " + ref, count: &e.Stats.Repairs,
			appends: []eventstore.StreamAppend{{Stream: as, Expected: aggregate.Expected(int64(an.ActionVersion) - 1), Events: []domain.Envelope{env}}}})
	}
	return ops
}

type freeWorker struct {
	id, incarnation string
	free            int
	runners         map[string]bool // nil: runs everything
}

// freeWorkers returns the workers with free slots: those the fold shows,
// less the handoffs to them that this executor has written (or is writing)
// and the fold does not show yet.
func (e *Executor) freeWorkers() []*freeWorker {
	var inHand map[string]int
	for xs, h := range e.handing {
		_, xid := domain.SplitStream(xs)
		if w := e.state.Workers[h.worker]; w != nil && e.state.IsLive(xid) {
			if _, folded := w.InFlight[xid]; !folded {
				if inHand == nil {
					inHand = map[string]int{}
				}
				inHand[h.worker]++
			}
		}
	}
	var out []*freeWorker
	for _, id := range e.state.WorkerIDs() {
		w := e.state.Workers[id]
		if ws := domain.WorkerStream(id); e.busy(ws) {
			continue // its lost verdict is being written
		} else if _, ok := e.doubted[ws]; ok {
			continue // its lost verdict may be in the log
		}
		if n := w.Free() - inHand[id]; n > 0 {
			fw := &freeWorker{id: id, incarnation: w.Incarnation(), free: n}
			if rs := w.Runners(); len(rs) > 0 {
				fw.runners = map[string]bool{}
				for _, r := range rs {
					fw.runners[r] = true
				}
			}
			out = append(out, fw)
		}
	}
	return out
}

// pickWorker returns the worker with the most free slots that runs runner.
func pickWorker(ws []*freeWorker, runner string) *freeWorker { return pickWorkerBut(ws, runner, "") }

// pickWorkerBut is pickWorker leaving out worker not.
func pickWorkerBut(ws []*freeWorker, runner, not string) *freeWorker {
	var best *freeWorker
	for _, w := range ws {
		if w.free <= 0 || w.id == not || (w.runners != nil && !w.runners[runner]) {
			continue
		}
		if best == nil || w.free > best.free {
			best = w
		}
	}
	return best
}

// decideAttention handles plain executions the executor owns outside the
// queue: pre-handoff cancellation requests, and executions taken back from a
// worker (hand them to another worker, or fail them when attempts are exhausted).
func (e *Executor) decideAttention(ops []op, attention []string) []op {
	workers := e.freeWorkers()
	for _, id := range attention {
		if len(ops) >= e.cfg.MaxBatch {
			break
		}
		x := e.state.Execution(id)
		xs := domain.ExecutionStream(id)
		if x == nil || e.busy(xs) || x.IsParent() {
			continue
		}
		if x.CancelRequested() {
			if ev, err := x.Cancel(domain.OwnerExecutor, e.cfg.Name, x.CancelReason()); err == nil {
				ev.Code = domain.CancelRequested
				ops = append(ops, op{what: "cancel " + id, count: &e.Stats.Cancels,
					appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
			}
			continue
		}
		if x.Status() != domain.StatusScheduling {
			continue
		}
		q := e.state.Queues.Get(x.Action())
		if q == nil {
			continue
		}
		p := q.Policy()
		if x.Attempt() >= p.MaxAttempts {
			code := x.TakenBack()
			why := "no worker started it within its scheduled_timeout"
			if code == domain.FailWorkerLost {
				why = "its worker was lost or stopped while holding it"
			}
			ev, err := x.Fail(domain.OwnerExecutor, e.cfg.Name,
				fmt.Sprintf("%s: gave up after %d attempts (max_attempts %d): %s", code, x.Attempt(), p.MaxAttempts, why), nil)
			if err == nil {
				ev.Code = code
				ops = append(ops, op{what: "fail " + id, count: &e.Stats.Failures,
					appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
			}
			continue
		}
		// Another worker than the one it was taken back from, if one is free.
		wk := pickWorkerBut(workers, p.Runner, x.Worker())
		if wk == nil {
			wk = pickWorker(workers, p.Runner)
		}
		if wk == nil {
			continue
		}
		ev, err := x.Schedule(wk.id, wk.incarnation, p)
		if err != nil {
			continue
		}
		wk.free--
		ops = append(ops, op{what: "reschedule " + id, count: &e.Stats.Grants, grants: true,
			appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
		e.handing[xs] = handoff{worker: wk.id, version: uint64(x.Version() + 1)}
	}
	return ops
}

// maxChildrenPerOp bounds the children one fan-out append requests.
const maxChildrenPerOp = 64

// decideParents drives with_items parents: start (or reject, or cancel) a
// requested one; for a running one, request the next children in item order
// while fewer than its window are in flight, end it once every child has
// ended, and on a cancellation request pass the request on to its children
// and end it once they have ended.
//
// Zero over-dispatch holds whatever the timing: one append writes the
// parent's execution.children_requested (at the parent's expected version)
// and the next run of children in item order (ids derived from parent and
// item index, each at expected version "no stream"). A decision made on a
// lagging fold sees no more children ended than have, so the in-flight count
// at commit is at most the one decided on; the parent's version serialises
// fan-out with cancellation requests and the parent's end, so no child is
// requested twice, after a cancellation request, or after the end.
func (e *Executor) decideParents(ops []op, attention []string) []op {
	for _, id := range attention {
		if len(ops) >= e.cfg.MaxBatch {
			break
		}
		x := e.state.Execution(id)
		xs := domain.ExecutionStream(id)
		if x == nil || !x.IsParent() || e.busy(xs) {
			continue
		}
		switch x.Status() {
		case domain.StatusRequested:
			var ev domain.Event
			var err error
			var count *atomic.Int64
			switch q := e.state.Queues.Get(x.Action()); {
			case x.CancelRequested():
				c, cerr := x.Cancel(domain.OwnerExecutor, e.cfg.Name, x.CancelReason())
				c.Code = domain.CancelRequested
				ev, err, count = c, cerr, &e.Stats.Cancels
			case q == nil || !q.Defined():
				ev, err = x.Reject(domain.RejectUnknownAction, fmt.Sprintf("action %q is not defined", x.Action()))
				count = &e.Stats.Rejections
			default:
				ev, err = x.StartParent()
			}
			if err == nil {
				ops = append(ops, op{what: "parent " + id, count: count, appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
			}
		case domain.StatusRunning:
			ops = e.decideRunningParent(ops, id, x)
		}
	}
	return ops
}

func (e *Executor) decideRunningParent(ops []op, id string, x *domain.Execution) []op {
	f := e.state.Fanouts[id]
	if f == nil {
		return ops
	}
	xs := domain.ExecutionStream(id)
	// The parent's own stream says how many children it requested; children
	// whose events the fold has not reached yet count as in flight.
	asked := x.ChildrenRequested()
	if f.Requested < asked {
		// Children announced and not (yet) in the log: nothing else is
		// decided for this parent until they are; if they stay missing, its
		// fan-out was cut short after the announcement, so complete it.
		return e.requestChildren(ops, id, x, f.Requested, asked-f.Requested, f.Announce, true)
	}
	if x.CancelRequested() {
		for _, cid := range sortedKeys(f.Live) {
			c := e.state.Execution(cid)
			cs := domain.ExecutionStream(cid)
			if c == nil || c.CancelRequested() || e.busy(cs) {
				continue
			}
			ev, err := c.RequestCancelAs(domain.OwnerExecutor, fmt.Sprintf("its with_items parent %s was cancelled", id))
			if err == nil {
				ops = append(ops, op{what: "cancel child " + cid, appends: []eventstore.StreamAppend{e.stage(cs, c.Version(), ev)}})
			}
		}
		if len(f.Live) == 0 && f.Ended == asked {
			ev, err := x.Cancel(domain.OwnerExecutor, e.cfg.Name,
				fmt.Sprintf("cancelled on request after %d of %d items were requested", asked, x.Items()))
			if err == nil {
				ev.Code = domain.CancelRequested
				ev.Result = fanoutResult(x, f)
				ops = append(ops, op{what: "cancel parent " + id, count: &e.Stats.ParentsEnded,
					appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
			}
		}
		return ops
	}
	if asked >= x.Items() {
		if f.Ended < asked {
			return ops
		}
		var ev domain.Event
		var err error
		if f.Failed == 0 {
			ev, err = x.Complete(domain.OwnerExecutor, e.cfg.Name, fanoutResult(x, f))
		} else {
			fe, ferr := x.Fail(domain.OwnerExecutor, e.cfg.Name, fmt.Sprintf("%d of %d items did not complete", f.Failed, x.Items()), fanoutResult(x, f))
			fe.Code = domain.FailItems
			ev, err = fe, ferr
		}
		if err == nil {
			ops = append(ops, op{what: "end parent " + id, count: &e.Stats.ParentsEnded,
				appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
		}
		return ops
	}
	room := min(x.Window()-(asked-f.Ended), x.Items()-asked, maxChildrenPerOp)
	if room <= 0 {
		return ops
	}
	return e.requestChildren(ops, id, x, asked, room, uuid.UUID{}, false)
}

// requestChildren requests items first..first+n-1 of parent id: with
// repair unset, as a fan-out op led by the parent's
// execution.children_requested (the fence); with repair set, only the
// children, which the fold shows announced by the parent's event announce
// and missing (once ripe). Children's event ids derive from the
// announcement's, so every executor completing a fan-out writes the same ones.
func (e *Executor) requestChildren(ops []op, id string, x *domain.Execution, first, n int, announce uuid.UUID, repair bool) []op {
	o := op{what: "fan out " + id, count: &e.Stats.Children, seq: seqChainPastRaces}
	if repair {
		if !e.ripe("children " + id) {
			return ops
		}
		o.what, o.count = "request announced children of "+id, &e.Stats.Repairs
	} else {
		ev, err := x.RequestChildren(n)
		if err != nil {
			return ops
		}
		a := e.stage(domain.ExecutionStream(id), x.Version(), ev)
		announce = a.Events[0].ID
		o.appends = append(o.appends, a)
	}
	for i := first; i < first+n; i++ {
		cs := domain.ExecutionStream(domain.ChildID(id, i))
		if e.busy(cs) {
			break // a request for it is in flight; decide again once it is folded
		}
		in, err := domain.ChildInput(x.Input(), x.Item(i))
		if err != nil {
			e.log.Error("cannot build a child's input", "parent", id, "item", i, "err", err)
			break // the request was validated: this does not happen
		}
		ev, err := domain.NewExecution(domain.ChildID(id, i)).Request(domain.ExecutionRequested{Action: x.Action(), Input: in, Parent: id, ItemIndex: i})
		if err != nil {
			e.log.Error("cannot request a child", "parent", id, "item", i, "err", err)
			break
		}
		o.appends = append(o.appends, e.stageAfter(announce, cs, -1, ev))
		o.n++
	}
	if o.n != n && (!repair || o.n == 0) {
		for _, a := range o.appends {
			delete(e.awaiting, a.Stream)
		}
		return ops
	}
	return append(ops, o)
}

// fanoutResult is a with_items parent's result: how its items ended.
func fanoutResult(x *domain.Execution, f *projections.Fanout) json.RawMessage {
	b, _ := json.Marshal(struct {
		Items     int `json:"items"`
		Requested int `json:"requested"`
		Completed int `json:"completed"`
		Failed    int `json:"failed"`
	}{x.Items(), f.Requested, f.Ended - f.Failed, f.Failed})
	return b
}

// decideExpiries takes back handoffs that no worker started in time (on a
// timed cycle), executions held by an incarnation that is no longer the
// worker's current one or by a stopped or lost worker, and handoffs to a
// draining worker that it has not started (it takes nothing new).
func (e *Executor) decideExpiries(ops []op, now time.Time, timed bool) []op {
	for _, wid := range e.state.WorkerIDs() {
		w := e.state.Workers[wid]
		if len(w.InFlight) == 0 || (!timed && w.Status() == domain.WorkerActive) {
			continue // an active worker's replaced incarnations are found on the next tick
		}
		for _, id := range e.state.HeldBy(wid) {
			if len(ops) >= e.cfg.MaxBatch {
				return ops
			}
			x := e.state.Execution(id)
			xs := domain.ExecutionStream(id)
			if x == nil || e.busy(xs) {
				continue
			}
			var reason string
			switch {
			case w.Status() == domain.WorkerLostStatus || w.Status() == domain.WorkerStoppedStatus:
				reason = fmt.Sprintf("worker %s incarnation %s is %s", wid, x.Incarnation(), w.Status())
			case x.Incarnation() != "" && x.Incarnation() != w.Incarnation():
				reason = fmt.Sprintf("worker %s incarnation %s was replaced by %s", wid, x.Incarnation(), w.Incarnation())
			case w.Status() == domain.WorkerDrainingStatus && x.Status() == domain.StatusScheduled:
				reason = fmt.Sprintf("worker %s is draining and had not started it", wid)
			}
			if reason != "" {
				if ev, err := x.Abandon(reason); err == nil {
					ops = append(ops, op{what: "abandon " + id, count: &e.Stats.Abandons, takeBack: true,
						appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
				}
				continue
			}
			if timed && x.Status() == domain.StatusScheduled {
				if ev, err := x.ExpireHandoff(now); err == nil {
					ops = append(ops, op{what: "expire " + id, count: &e.Stats.Expiries, takeBack: true,
						appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
				}
			}
		}
	}
	return ops
}

// maxAbandonsWithVerdict bounds the abandonments written in the same append
// as a lost-worker verdict; the rest follow in decideExpiries.
const maxAbandonsWithVerdict = 4096

// loseWorker decides worker id's lost verdict and, in the same atomic append,
// the abandonment of every execution it holds: from the verdict's position
// on, no write of the lost incarnation for those executions can pass the
// handoff rule. If one of them moved meanwhile (the worker was alive after
// all), the whole append fails and the next cycle decides again.
func (e *Executor) loseWorker(ops []op, id string, now time.Time, lease time.Duration, force bool, reason string) []op {
	w := e.state.Workers[id]
	ws := domain.WorkerStream(id)
	if w == nil || (w.Status() != domain.WorkerActive && w.Status() != domain.WorkerDrainingStatus) || e.busy(ws) {
		return ops
	}
	verdict, err := w.DeclareLost(now, lease, force, reason)
	if err != nil {
		return ops
	}
	for xs, h := range e.handing {
		if h.worker != id {
			continue
		}
		if _, xid := domain.SplitStream(xs); !e.state.IsLive(xid) {
			delete(e.handing, xs) // it has ended since: the handoff cannot land any more
			continue
		}
		return ops // decide once the fold shows whether our handoff to it landed
	}
	held := e.state.HeldBy(id)
	if len(held) > maxAbandonsWithVerdict {
		held = held[:maxAbandonsWithVerdict]
	}
	for _, xid := range held {
		if e.busy(domain.ExecutionStream(xid)) {
			return ops // decide once our own write to it is folded
		}
	}
	va := e.stage(ws, w.Version(), verdict)
	o := op{what: "lose worker " + id, count: &e.Stats.LostWorkers, takeBack: true, seq: seqChain, appends: []eventstore.StreamAppend{va}}
	for _, xid := range held {
		x := e.state.Execution(xid)
		if x == nil {
			continue
		}
		ev, err := x.Abandon(fmt.Sprintf("worker %s incarnation %s was declared lost: %s", id, x.Incarnation(), reason))
		if err != nil {
			continue
		}
		o.appends = append(o.appends, e.stageAfter(va.Events[0].ID, domain.ExecutionStream(xid), x.Version(), ev))
	}
	if e.single && len(o.appends) > 1 {
		// One stream at a time: every abandonment first, each fenced by its
		// execution's version against the worker's own writes, then the
		// verdict, fenced by the worker stream's version against its
		// heartbeats. If the worker wrote to one of them meanwhile, it is
		// alive: the chain stops before the verdict (the abandonments that
		// landed stand, like handoff expiries). Once the verdict lands,
		// every execution it held is already taken back, so no write of the
		// lost incarnation can pass the handoff rule after it.
		o.appends = append(o.appends[1:], va)
		o.key = len(o.appends) - 1
	}
	return append(ops, o)
}

// decideLeases declares lost the workers whose last event in the log is
// older than the lease at now.
func (e *Executor) decideLeases(ops []op, now time.Time) []op {
	for _, id := range e.state.WorkerIDs() {
		if len(ops) >= e.cfg.MaxBatch {
			break
		}
		ops = e.loseWorker(ops, id, now, e.cfg.WorkerLease, false, fmt.Sprintf("no event in the log for %s (its lease)", e.cfg.WorkerLease))
	}
	return ops
}

// decideLostAtStart declares every active worker lost, right after the fold
// caught up, when the configuration says they all died with the last run.
func (e *Executor) decideLostAtStart(ops []op) []op {
	if !e.cfg.LoseWorkersAtStart {
		return ops
	}
	for _, id := range e.state.WorkerIDs() {
		ops = e.loseWorker(ops, id, e.cfg.Clock.Now(), 0, true, "its process ended with the previous run")
	}
	return ops
}

// decideQueueTimeouts cancels waiters that waited longer than their queue timeout.
func (e *Executor) decideQueueTimeouts(ops []op, now time.Time) []op {
	for _, ref := range e.state.Queues.Refs() {
		q := e.state.Queues.Get(ref)
		for _, w := range q.TimedOut(now, e.cfg.MaxBatch) {
			if len(ops) >= e.cfg.MaxBatch {
				return ops
			}
			x := e.state.Execution(w.Execution)
			xs := domain.ExecutionStream(w.Execution)
			if x == nil || e.busy(xs) {
				continue
			}
			ev, err := x.Cancel(domain.OwnerExecutor, e.cfg.Name,
				fmt.Sprintf("%s: waited more than %s in the queue of %q", domain.CancelQueueTimeout, q.Policy().QueueTimeout(), ref))
			if err == nil {
				ev.Code = domain.CancelQueueTimeout
				ops = append(ops, op{what: "queue timeout " + w.Execution, count: &e.Stats.Cancels,
					appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
			}
		}
	}
	return ops
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
