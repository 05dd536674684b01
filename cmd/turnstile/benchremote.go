package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/worker"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/remote"
)

// startBenchRemote serves the API (with the worker protocol) on a loopback
// port and starts n workers of the Go worker package, each with slots
// slots, serving core.noop over that HTTP: bench lifecycle --remote. It
// returns once every worker has registered; stop ends them all.
func startBenchRemote(ctx context.Context, store eventstore.Store, cmds *command.Service, n, slots int, log *slog.Logger) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	views := projections.NewViews()
	viewsDone := make(chan struct{})
	go func() { _ = views.Run(ctx, store); close(viewsDone) }()
	rs, err := remote.New(remote.Config{Store: store, Logger: log, MaxNames: -1}) // a bench registers as many workers as it is told
	if err != nil {
		cancel()
		return nil, err
	}
	if err := rs.Start(ctx); err != nil {
		cancel()
		return nil, err
	}
	<-rs.Started()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		return nil, err
	}
	srv := &http.Server{Handler: api.New(api.Config{Commands: cmds, Queries: projections.NewQueries(views, store), Remote: rs, Logger: log}).Handler(),
		ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	url := "http://" + ln.Addr().String()
	quiet := slog.New(slog.DiscardHandler)
	done := make(chan error, n)
	for i := range n {
		w := worker.New(worker.Config{Server: url, Name: fmt.Sprintf("remote-%d", i+1), Slots: slots, Logger: quiet, DrainGrace: 5 * time.Second})
		w.Handle("core.noop", func(context.Context, worker.Job) (any, error) { return struct{}{}, nil })
		go func() { done <- w.Run(ctx) }()
	}
	stop = func() {
		cancel()
		for range n {
			<-done
		}
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = srv.Shutdown(sctx)
		rs.Stop()
		<-viewsDone
	}
	// Registered once the read model lists them all.
	deadline := time.Now().Add(30 * time.Second)
	for len(views.Workers()) < n {
		if time.Now().After(deadline) {
			stop()
			return nil, errors.New("bench: the remote workers did not register within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	log.Info("remote workers registered", "workers", n, "slots", slots, "url", url)
	return stop, nil
}
