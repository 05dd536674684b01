// Package node is the one place that assembles a turnstile process:
// Serve (turnstile serve: the log, the read model, the executor, in-process
// workers and the API), RunExecutor and RunWorker (one executor, or one
// worker, as a process of its own on a shared log), and Start, the shared
// core of them all and of turnstile bench: the executor (active, or standing
// by), in-process workers, the in-process bus and the forwarder that feeds
// it from the log. cmd/turnstile parses flags into their configs; tests use
// Start directly.
//
// Every long-running part has the lifecycle of internal/startstop: Start,
// Started (readiness, a signal), Stop. A process starts its parts in order,
// each once the one before it is ready, and stops them in reverse.
//
// Across processes the log is the bus: each process that runs workers has
// its own forwarder, which subscribes to the log (on PostgreSQL, woken by
// LISTEN/NOTIFY) and routes the handoffs and cancel requests to its workers
// over its in-process watermill bus.
package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/internal/startstop"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/archiver"
	"github.com/turnstile/turnstile/services/bus"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/executor"
	"github.com/turnstile/turnstile/services/runner"
	"github.com/turnstile/turnstile/services/worker"
)

// Node is one process's share of turnstile: the executor, in-process
// workers, the in-process bus and its forwarder, on one store.
type Node struct {
	Store    eventstore.Store
	Bus      *bus.Bus
	Executor *executor.Executor // nil with Config.NoExecutor
	Workers  []*worker.Worker
	Fwd      *bus.Forwarder
	Commands *command.Service
	Archiver *archiver.Archiver // nil without Config.Archive
	// Poison counts the bus messages set aside in the poison topic.
	Poison *bus.PoisonCounter

	grace    time.Duration
	stopOnce sync.Once
}

// Config says what a Node runs.
type Config struct {
	Workers, Slots int
	// WorkerIDs names the workers; when empty they are local-1 … local-N.
	// Given, Workers must be 0 or len(WorkerIDs).
	WorkerIDs     []string
	CheckpointDir string        // "" keeps checkpoints in memory
	SnapshotDir   string        // where the executor keeps snapshots of its fold; "" takes none
	SnapshotEvery uint64        // events between those snapshots; default the executor's
	LoseWorkers   bool          // previous run's workers are gone (embedded store)
	StopGrace     time.Duration // how long Stop lets in-flight work finish; default 10s
	Logger        *slog.Logger

	// NoExecutor runs no executor (a process of workers only, or of the API).
	NoExecutor bool
	// Standby starts the executor standing by: folding, not deciding, until
	// Executor.SetActive(true) (a lease decides; see services/lease).
	Standby bool
	// ExecutorName is the executor's writer name in the log; default "executor".
	ExecutorName string
	// WorkerLease is the executor's worker lease (0: its default).
	WorkerLease time.Duration
	// Heartbeat is the workers' heartbeat interval (0: their default).
	Heartbeat time.Duration
	// Runners configures the built-in runners the in-process workers offer
	// (the zero value: runner.DefaultEnabled, neither core.shell nor core.http).
	Runners runner.Config
	// MaxResultBytes bounds the result an in-process worker's run records
	// (worker.Config.MaxResultBytes; 0: domain.DefaultMaxResultBytes).
	MaxResultBytes int
	// ForwardFromHead starts the forwarder at the log's head as it is when
	// the node starts (before its workers register, so none of their
	// handoffs can be earlier) instead of at its checkpoint: for a log that
	// other processes share, whose old handoffs name other incarnations.
	ForwardFromHead bool

	// CheckpointEvery is the executor's Config.CheckpointEvery: how much log
	// time passes between checkpoints in the log (0: none).
	CheckpointEvery time.Duration
	// Archive, if set, runs the archiver (services/archiver) beside the
	// executor, while it is active and caught up: the log before the newest
	// checkpoint at least ArchiveAfter old moves there and leaves the live
	// log. It needs CheckpointEvery, a store that trims, and an executor.
	Archive      archiver.Archive
	ArchiveAfter time.Duration
	ArchiveEvery time.Duration // how often the archiver looks (0: its default)
	// Trimmed, if set, hears the live log's new start after each trim.
	Trimmed func(start uint64)
}

// Start starts the executor, waits until it has caught up with the log
// (its Started signal), then starts the workers and the forwarder, and
// returns once every part is ready.
func Start(ctx context.Context, store eventstore.Store, cfg Config) (*Node, error) {
	if err := cfg.Runners.Validate(); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 10 * time.Second
	}
	n := &Node{Store: store, Bus: bus.NewInProcess(cfg.Logger), Commands: &command.Service{Store: store, Writer: "api"}, grace: cfg.StopGrace}
	fail := func(err error) (*Node, error) {
		n.Stop()
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	n.Commands.Log = cfg.Logger
	poison, perr := n.Bus.WatchPoison(ctx, cfg.Logger.With("component", "bus"))
	if perr != nil {
		return fail(perr)
	}
	n.Poison = poison
	ids := cfg.WorkerIDs
	if len(ids) == 0 {
		for i := 0; i < cfg.Workers; i++ {
			ids = append(ids, fmt.Sprintf("local-%d", i+1))
		}
	} else if cfg.Workers != 0 && cfg.Workers != len(ids) {
		return fail(fmt.Errorf("node: %d workers but %d worker ids", cfg.Workers, len(ids)))
	}
	var forwardFrom uint64
	if cfg.ForwardFromHead && len(ids) > 0 {
		head, err := store.Head(ctx)
		if err != nil {
			return fail(err)
		}
		forwardFrom = max(head, 1) // 0 would mean "the checkpoint"; position 0 is never a handoff
	}
	var err error
	var snaps *projections.SnapshotFiles
	if cfg.SnapshotDir != "" {
		snaps = &projections.SnapshotFiles{Dir: cfg.SnapshotDir}
	}
	if !cfg.NoExecutor {
		n.Executor, err = executor.New(executor.Config{Store: store, Logger: cfg.Logger, LoseWorkersAtStart: cfg.LoseWorkers,
			Name: cfg.ExecutorName, Standby: cfg.Standby, WorkerLease: cfg.WorkerLease, Snapshots: snaps, SnapshotEvery: cfg.SnapshotEvery,
			CheckpointEvery: cfg.CheckpointEvery})
		if err != nil {
			return fail(err)
		}
		if err := n.Executor.Start(ctx); err != nil {
			return fail(err)
		}
		// Wait for the fold to catch up (and the previous run's workers to be
		// declared lost) before this run's workers register.
		if err := startstop.WaitAllStarted(ctx, n.Executor); err != nil {
			return fail(fmt.Errorf("node: the executor did not catch up with the log: %w", err))
		}
	}
	if cfg.Archive != nil {
		if err := n.startArchiver(ctx, store, cfg); err != nil {
			return fail(err)
		}
	}
	runners := runner.Builtins(cfg.Runners) // one registry, shared by the workers
	for _, id := range ids {
		w, err := worker.New(worker.Config{ID: id, Slots: cfg.Slots, Store: store, Bus: n.Bus, Logger: cfg.Logger, Heartbeat: cfg.Heartbeat, Runners: runners,
			MarkEvery: markEvery(cfg), MaxResultBytes: cfg.MaxResultBytes})
		if err != nil {
			return fail(err)
		}
		if err := w.Start(ctx); err != nil {
			return fail(err)
		}
		n.Workers = append(n.Workers, w)
	}
	var cps projections.Checkpoints = &projections.MemCheckpoints{}
	if cfg.CheckpointDir != "" {
		cps = &projections.FileCheckpoints{Dir: cfg.CheckpointDir}
	}
	if len(ids) == 0 {
		return n, nil // nothing here listens to the bus
	}
	n.Fwd, err = bus.NewForwarder(bus.ForwarderConfig{Store: store, Publisher: n.Bus.Publisher, Checkpoints: cps, Logger: cfg.Logger, From: forwardFrom})
	if err != nil {
		return fail(err)
	}
	if err := n.Fwd.Start(ctx); err != nil {
		return fail(err)
	}
	parts := []startstop.Service{n.Fwd}
	for _, w := range n.Workers {
		parts = append(parts, w)
	}
	if err := startstop.WaitAllStarted(ctx, parts...); err != nil {
		return fail(err)
	}
	return n, nil
}

// startArchiver starts the archiver beside the executor.
func (n *Node) startArchiver(ctx context.Context, store eventstore.Store, cfg Config) error {
	switch {
	case n.Executor == nil:
		return errors.New("node: archiving needs the executor in this process")
	case cfg.CheckpointEvery <= 0:
		return errors.New("node: archiving needs checkpoints in the log (a checkpoint interval)")
	}
	ex := n.Executor
	a, err := archiver.New(archiver.Config{Store: store, Archive: cfg.Archive, After: cfg.ArchiveAfter, Every: cfg.ArchiveEvery,
		Active: func() bool { return ex.Active() && ex.Ready() }, Trimmed: cfg.Trimmed, Logger: cfg.Logger})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if err := a.Start(ctx); err != nil {
		return err
	}
	n.Archiver = a
	return nil
}

// Stop stops the parts in the reverse order of their start.
func (n *Node) Stop() {
	n.Drain(context.Background(), n.grace)
}

// Drain stops the node gracefully: every worker drains at the same time
// (worker.draining, nothing new, in-flight work finishes within grace or is
// failed with a reason, worker.stopped) while the executor and the bus go on
// serving them; then the forwarder, the executor and the bus stop. Ending
// ctx cuts the grace period short. Only the first call (of Stop or Drain)
// does anything.
func (n *Node) Drain(ctx context.Context, grace time.Duration) {
	n.stopOnce.Do(func() { n.drain(ctx, grace) })
}

func (n *Node) drain(ctx context.Context, grace time.Duration) {
	var wg sync.WaitGroup
	for _, w := range n.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = w.Drain(ctx, grace)
		}()
	}
	wg.Wait()
	if n.Archiver != nil {
		n.Archiver.Stop()
	}
	if n.Fwd != nil {
		n.Fwd.Stop()
	}
	if n.Executor != nil {
		n.Executor.Stop()
	}
	if n.Poison != nil {
		n.Poison.Stop()
	}
	if n.Bus != nil {
		_ = n.Bus.Close()
	}
}

// markEvery is how long the in-process workers let a debt of a sign of
// life run (worker.Config.MarkEvery): a quarter of the executor's worker
// lease when this node runs the executor, else the workers' default.
func markEvery(cfg Config) time.Duration {
	if cfg.NoExecutor {
		return 0
	}
	return cmp.Or(cfg.WorkerLease, 15*time.Second) / 4
}
