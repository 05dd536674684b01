// Package node assembles one process's services: the executor, in-process
// workers, the in-process bus and the forwarder that feeds it from the log.
// turnstile serve and tests use it.
package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/bus"
	"github.com/turnstile/turnstile/services/executor"
	"github.com/turnstile/turnstile/services/worker"
)

// Node is one process's share of turnstile: the executor, in-process
// workers, the in-process bus and its forwarder, on one store.
type Node struct {
	Store    eventstore.Store
	Bus      *bus.Bus
	Executor *executor.Executor
	Workers  []*worker.Worker
	Fwd      *bus.Forwarder
	Commands *executor.Commands
	// Poison counts the bus messages set aside in the poison topic.
	Poison *bus.PoisonCounter

	stopPoison context.CancelFunc

	grace    time.Duration
	stopOnce sync.Once
}

// Config says what a Node runs.
type Config struct {
	Workers, Slots int
	CheckpointDir  string        // "" keeps checkpoints in memory
	LoseWorkers    bool          // previous run's workers are gone (embedded store)
	StopGrace      time.Duration // how long Stop lets in-flight work finish; default 10s
	Logger         *slog.Logger
}

// Start starts the executor, waits until it has caught up with the log,
// then starts the workers and the forwarder.
func Start(ctx context.Context, store eventstore.Store, cfg Config) (*Node, error) {
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 10 * time.Second
	}
	n := &Node{Store: store, Bus: bus.NewInProcess(cfg.Logger), Commands: &executor.Commands{Store: store, Writer: "api"}, grace: cfg.StopGrace}
	fail := func(err error) (*Node, error) {
		n.Stop()
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var err error
	pctx, stopPoison := context.WithCancel(ctx)
	n.stopPoison = stopPoison
	if n.Poison, err = n.Bus.WatchPoison(pctx, cfg.Logger.With("component", "bus")); err != nil {
		return fail(err)
	}
	n.Executor, err = executor.New(executor.Config{Store: store, Logger: cfg.Logger, LoseWorkersAtStart: cfg.LoseWorkers})
	if err != nil {
		return fail(err)
	}
	if err := n.Executor.Start(ctx); err != nil {
		return fail(err)
	}
	// Wait for the fold to catch up (and the previous run's workers to be
	// declared lost) before this run's workers register.
	for !n.Executor.Ready() {
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	// Every handoff to this run's workers follows their registration, so
	// without a saved checkpoint the forwarder (which feeds only them) starts
	// at the head as it is before they register, rather than at position 0:
	// replaying every handoff ever made to a previous run's incarnations
	// would hold up the new ones for as long as the log is long.
	fwdFrom, err := store.Head(ctx)
	if err != nil {
		return fail(err)
	}
	for i := 0; i < cfg.Workers; i++ {
		w, err := worker.New(worker.Config{ID: fmt.Sprintf("local-%d", i+1), Slots: cfg.Slots, Store: store, Bus: n.Bus, Logger: cfg.Logger})
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
		cps, fwdFrom = &projections.FileCheckpoints{Dir: cfg.CheckpointDir}, 0
	}
	n.Fwd, err = bus.NewForwarder(bus.ForwarderConfig{Store: store, Publisher: n.Bus.Publisher, Checkpoints: cps, Logger: cfg.Logger, From: fwdFrom})
	if err != nil {
		return fail(err)
	}
	if err := n.Fwd.Start(ctx); err != nil {
		return fail(err)
	}
	return n, nil
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
	if n.Fwd != nil {
		_ = n.Fwd.Stop()
	}
	if n.Executor != nil {
		n.Executor.Stop()
	}
	if n.stopPoison != nil {
		n.stopPoison()
	}
	if n.Bus != nil {
		_ = n.Bus.Close()
	}
}
