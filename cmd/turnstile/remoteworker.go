package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/turnstile/turnstile/client/worker"
	"github.com/turnstile/turnstile/services/runner"
)

// remoteWorkerConfig is turnstile worker --server: the built-in runners
// served over HTTP through the worker package, with no database credentials.
type remoteWorkerConfig struct {
	Server, Token, Name string
	Slots               int
	Grace               time.Duration
	Runners             runner.Config
	Logger              *slog.Logger
}

// runRemoteWorker serves the enabled built-in runners until ctx ends, then
// drains within Grace.
func runRemoteWorker(ctx context.Context, cfg remoteWorkerConfig) error {
	reg := runner.Builtins(cfg.Runners)
	w := worker.New(worker.Config{Server: cfg.Server, Token: cfg.Token, Name: cfg.Name, Slots: cfg.Slots, DrainGrace: cfg.Grace, Logger: cfg.Logger})
	for _, name := range reg.Names() {
		r, _ := reg.Lookup(name)
		w.Handle(name, func(ctx context.Context, job worker.Job) (any, error) {
			out, err := runner.RunKeyed(ctx, r, job.RunnerConfig, job.Input, job.KeyField, job.ResourceKeyFields...)
			var f *runner.Failure
			if errors.As(err, &f) {
				return nil, worker.Fail(f.Error(), f.Result)
			}
			if err != nil {
				return nil, err
			}
			return out, nil
		})
	}
	cfg.Logger.Info("worker serving over HTTP", "server", cfg.Server, "name", cfg.Name, "slots", cfg.Slots, "runners", reg.Names())
	return w.Run(ctx)
}
