// The Executor: its configuration, its bookkeeping and its life (New,
// Start, SetActive, Stop). The loop (loop.go), or a caller stepping the
// executor through Fold, Decide and Commit, is the only writer of the fold
// and of the bookkeeping maps, and writes them under the Executor's lock,
// which Inspect takes to read them.
//
// The rest of the package is one rule, or one piece of the machinery, per
// file; each file's first comment says the rule it enforces, what it
// writes and when:
//
//	loop.go          the loop: follow the log, fold it, decide, append
//	decide.go        one decision cycle: the rules in order; the pacing of repairs
//	admit.go         requests their queue refused are rejected
//	announced.go     action changes announced but not written are completed
//	grant.go         queue heads get a slot and a handoff, through one helper
//	workers.go       which workers have free slots for a handoff
//	attention.go     taken back: hand again or fail; cancelled before the handoff
//	expire.go        take-back: unstarted handoffs expire, gone holders are abandoned
//	lost.go          silent workers are declared lost, with their executions
//	queuetimeout.go  waiters past their queue_timeout are cancelled
//	items.go         with_items parents fan out within their window, and end
//	stage.go         a decision as appends: expected versions and event ids
//	commit.go        one decision appended, and what its outcome leaves
//	flight.go        cycles appended in the background, a bounded number at once
//	snapshot.go      snapshots of the fold
//	checkpoint.go    checkpoints of the fold in the log, and restarts from them
//	stats.go         what the executor counts

package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/internal/startstop"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/clock"
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
	// WorkerLease is how long a worker that owes the log a sign of life
	// (it holds executions, or was handed one since its last event:
	// domain.Worker.Owe) may go without writing one before it is declared
	// lost. An idle worker owes none. Default 15s.
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
	// CheckpointEvery, if set, makes the active executor write a
	// checkpoint of its fold into the log whenever this much log time has
	// passed since the last one and something happened since (see
	// checkpoint.go). Start resumes from the newest checkpoint of the live
	// log whenever it is newer than the snapshot file, whether set or not
	// when the log before the fold was trimmed.
	CheckpointEvery time.Duration
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
	case c.CheckpointEvery < 0:
		return fmt.Errorf("executor: CheckpointEvery %s is negative", c.CheckpointEvery)
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

	cp            checkpoints    // checkpoints in the log (checkpoint.go)
	checkpointing sync.WaitGroup // checkpoint writes under way

	ready    atomic.Bool
	readied  startstop.Signal // closed with ready (lifecycle.go)
	active   atomic.Bool
	wakeup   chan struct{} // buffered: SetActive(true) asks for a decision cycle
	position atomic.Uint64
	life     startstop.Base // owns the loop's and the log reader's goroutines
	started  atomic.Bool    // Start ran: Stop has a loop to end and a fold to save
	stopOnce sync.Once
	done     chan struct{} // closed when the loop has returned
	mu       sync.Mutex    // guards state for readers outside the loop (Inspect)

	// Stats counts decisions, for metrics and tests.
	Stats Stats
}

// handoff is a handoff to worker, the last event of its append at version.
type handoff struct {
	worker  string
	version uint64
}

// New returns an executor; it does nothing until Start.
func New(cfg Config) (*Executor, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Executor{cfg: cfg, log: cfg.Logger.With("component", "executor", "name", cfg.Name), done: make(chan struct{}),
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
// fold stopped, until ctx ends or the store is closed. A second Start does
// nothing.
func (e *Executor) Start(ctx context.Context) error {
	ctx, ok := e.life.StartInit(ctx)
	if !ok {
		return nil
	}
	e.started.Store(true)
	e.loadSnapshot(ctx)
	e.loadCheckpoint(ctx)
	from := e.state.Next
	batches := make(chan []domain.Envelope, 64)
	heads := make(chan uint64, 1)
	subErr := make(chan error, 1)
	e.life.Go(func() {
		head, err := e.readHead(ctx)
		if err != nil {
			subErr <- err
			return
		}
		heads <- head
		subErr <- e.follow(ctx, from, batches)
	})
	e.life.Go(func() { e.loop(ctx, heads, batches, subErr) })
	return nil
}

// Stop ends the executor and waits for its loop to return, then saves a
// snapshot of its fold (when Config.Snapshots is set). A second Stop, or
// one before Start, does nothing.
func (e *Executor) Stop() {
	if !e.started.Load() {
		return
	}
	e.life.Stop()
	e.stopOnce.Do(func() {
		e.checkpointing.Wait()
		if e.state.Next != e.snapshotAt {
			e.saveSnapshot()
		}
		e.snapshots.Wait()
	})
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
