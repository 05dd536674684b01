package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/turnstile/turnstile/api"
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

// tokenFlags collects repeatable --token ROLE:SECRET flags.
type tokenFlags []string

func (t *tokenFlags) String() string     { return fmt.Sprintf("%d tokens", len(*t)) }
func (t *tokenFlags) Set(v string) error { *t = append(*t, v); return nil }

func cmdServe(ctx context.Context, args []string, stderr interface{ Write([]byte) (int, error) }) error {
	fs := newFlags("serve", stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "HTTP listen address (port 0: any free port, printed at start)")
	data := fs.String("data", "./data", "data directory of the embedded store")
	storeURL := fs.String("store", "", "store URL (default: the embedded store in --data)")
	workers := fs.Int("workers", 2, "in-process workers")
	slots := fs.Int("slots", 16, "executions each worker runs at once")
	var tokens tokenFlags
	fs.Var(&tokens, "token", "ROLE:SECRET bearer token (repeatable; also TURNSTILE_TOKENS=ROLE:SECRET,...)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *workers < 0 || *slots < 1 {
		return usageError{errors.New("--workers must be >= 0 and --slots >= 1")}
	}
	if env := os.Getenv("TURNSTILE_TOKENS"); env != "" {
		tokens = append(tokens, strings.Split(env, ",")...)
	}
	toks, err := api.ParseTokens(tokens)
	if err != nil {
		return usageError{err}
	}
	if err := api.CheckListenAddress(*addr, toks); err != nil {
		return usageError{err}
	}
	log := newLogger(stderr)
	store, where, err := openStore(*storeURL, *data)
	if err != nil {
		return err
	}
	defer store.Close()

	views := projections.NewViews()
	if err := views.CatchUp(ctx, store); err != nil {
		return fmt.Errorf("fold the log into the read model: %w", err)
	}
	n, err := startNode(ctx, store, nodeConfig{Workers: *workers, Slots: *slots, LoseWorkers: true,
		CheckpointDir: filepath.Join(where, "checkpoints"), Logger: log})
	if err != nil {
		return err
	}
	defer n.Stop()
	viewsDone := make(chan error, 1)
	viewsCtx, stopViews := context.WithCancel(ctx)
	defer stopViews()
	go func() { viewsDone <- views.Run(viewsCtx, store) }()

	srv := api.New(api.Config{Store: store, Commands: n.Commands, Views: views, Tokens: toks, Logger: log,
		Ready: n.Executor.Ready, Version: version})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	baseCtx, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return baseCtx }, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("turnstile serving", "addr", ln.Addr().String(), "store", where, "workers", *workers, "slots", *slots,
		"position", views.Next(), "auth", !toks.Empty())

	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("http server: %w", err)
	case err := <-viewsDone:
		if err != nil {
			return fmt.Errorf("read model stopped: %w", err)
		}
	}
	log.Info("stopping")
	cancelBase() // ends the feeds, so Shutdown does not wait for them
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutCtx); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	return nil
}
