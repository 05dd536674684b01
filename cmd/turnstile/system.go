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
	"github.com/turnstile/turnstile/services/node"
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
	grace := fs.Duration("grace", 10*time.Second, "on SIGTERM, how long in-flight executions may run before they are failed")
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

	// The read model and the executor fold the log at the same time (two
	// folds, two cores); the API listens once both have caught up.
	views := projections.NewViews()
	caught := make(chan error, 1)
	go func() { caught <- views.CatchUp(ctx, store) }()
	// The node outlives the signal: on SIGTERM its workers drain (see below).
	n, err := node.Start(context.WithoutCancel(ctx), store, node.Config{Workers: *workers, Slots: *slots, LoseWorkers: true,
		CheckpointDir: filepath.Join(where, "checkpoints"), Logger: log, StopGrace: *grace})
	if err != nil {
		return err
	}
	defer n.Stop()
	if err := <-caught; err != nil {
		return fmt.Errorf("fold the log into the read model: %w", err)
	}
	viewsDone := make(chan error, 1)
	viewsCtx, stopViews := context.WithCancel(ctx)
	defer stopViews()
	go func() { viewsDone <- views.Run(viewsCtx, store) }()
	// The feeds on the bus, for programs inside the deployment.
	feedBus := bus.NewFeedBus(log)
	defer feedBus.Close()
	go func() {
		fp := &bus.FeedPublisher{Store: store, Views: views, Publisher: feedBus.Publisher, Logger: log}
		if err := fp.Run(viewsCtx); err != nil {
			log.Error("feed publisher stopped", "err", err)
		}
	}()

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
	log.Info("draining workers", "grace", *grace)
	n.Stop() // workers drain, then the executor and the bus stop
	return nil
}
