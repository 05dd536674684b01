package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/bus"
	"github.com/turnstile/turnstile/services/executor"
	"github.com/turnstile/turnstile/services/worker"
)

func openStore(storeURL, dataDir string) (eventstore.Store, string, error) {
	kind, where, err := storeLocation(storeURL, dataDir)
	if err != nil {
		return nil, "", err
	}
	switch kind {
	case "embedded":
		// The data directory holds the log in log/ and checkpoints in checkpoints/.
		s, err := embedded.Open(filepath.Join(where, "log"), embedded.Options{})
		if err != nil {
			return nil, "", fmt.Errorf("open embedded store in %s: %w", where, err)
		}
		return s, where, nil
	}
	if kind == "memory" {
		return memstore.New(memstore.Options{}), "", nil
	}
	return nil, "", fmt.Errorf("store kind %q not supported", kind)
}

// node is one process's share of turnstile: executor, workers, the bus and
// its forwarder, on one store.
type node struct {
	Store    eventstore.Store
	Bus      *bus.Bus
	Executor *executor.Executor
	Workers  []*worker.Worker
	Fwd      *bus.Forwarder
	Commands *executor.Commands
}

type nodeConfig struct {
	Workers, Slots int
	CheckpointDir  string // "" keeps checkpoints in memory
	LoseWorkers    bool   // previous run's workers are gone (embedded store)
	Logger         *slog.Logger
}

func startNode(ctx context.Context, store eventstore.Store, cfg nodeConfig) (*node, error) {
	n := &node{Store: store, Bus: bus.NewInProcess(cfg.Logger), Commands: &executor.Commands{Store: store, Writer: "api"}}
	fail := func(err error) (*node, error) {
		n.Stop()
		return nil, err
	}
	var err error
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
		cps = &projections.FileCheckpoints{Dir: cfg.CheckpointDir}
	}
	n.Fwd, err = bus.NewForwarder(bus.ForwarderConfig{Store: store, Publisher: n.Bus.Publisher, Checkpoints: cps, Logger: cfg.Logger})
	if err != nil {
		return fail(err)
	}
	if err := n.Fwd.Start(ctx); err != nil {
		return fail(err)
	}
	return n, nil
}

// Stop stops the parts in the reverse order of their start.
func (n *node) Stop() {
	if n.Fwd != nil {
		_ = n.Fwd.Stop()
	}
	for _, w := range n.Workers {
		w.Stop()
	}
	if n.Executor != nil {
		n.Executor.Stop()
	}
	if n.Bus != nil {
		_ = n.Bus.Close()
	}
}

func cmdServe(ctx context.Context, args []string, stderr interface{ Write([]byte) (int, error) }) error {
	fs := newFlags("serve", stderr)
	data := fs.String("data", "./data", "data directory of the embedded store")
	storeURL := fs.String("store", "", "store URL (default: the embedded store in --data)")
	workers := fs.Int("workers", 2, "in-process workers")
	slots := fs.Int("slots", 16, "executions each worker runs at once")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *workers < 0 || *slots < 1 {
		return usageError{errors.New("--workers must be >= 0 and --slots >= 1")}
	}
	log := newLogger(stderr)
	store, where, err := openStore(*storeURL, *data)
	if err != nil {
		return err
	}
	defer store.Close()
	n, err := startNode(ctx, store, nodeConfig{Workers: *workers, Slots: *slots, LoseWorkers: true,
		CheckpointDir: filepath.Join(where, "checkpoints"), Logger: log})
	if err != nil {
		return err
	}
	log.Info("turnstile serving", "store", where, "workers", *workers, "slots", *slots, "position", n.Executor.Position())
	<-ctx.Done()
	log.Info("stopping")
	n.Stop()
	return nil
}
