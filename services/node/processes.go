// turnstile executor and turnstile worker assembled: one executor, or one
// worker, as a process of its own on a shared log.

package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/turnstile/turnstile/services/executor"
	"github.com/turnstile/turnstile/services/lease"
	"github.com/turnstile/turnstile/services/runner"
	"github.com/turnstile/turnstile/services/worker"
)

// ExecutorProcessConfig says what an executor process runs.
type ExecutorProcessConfig struct {
	StoreURL    string // a shared log (postgres://)
	Name        string // the executor's writer name in the log, distinct per process
	Lease       lease.Lease
	WorkerLease time.Duration
	HealthAddr  string // "" serves no health endpoints
	Logger      *slog.Logger

	// CheckpointEvery, ArchiveDir, ArchiveAfter and ArchiveSegmentEvents
	// are serve's (ServeConfig): the archiver runs here, while this
	// executor holds the lease.
	CheckpointEvery      time.Duration
	ArchiveDir           string
	ArchiveAfter         time.Duration
	ArchiveSegmentEvents int
}

// RunExecutor runs an executor until ctx ends: it stands by with its fold
// current and decides while it holds the lease, which it releases on the
// way out (so a standby takes over at once), or gives up at once when its
// fold fails (an error).
func RunExecutor(ctx context.Context, cfg ExecutorProcessConfig) error {
	log := cfg.Logger
	// The health listener is bound before anything acts.
	var ex atomic.Pointer[executor.Executor]
	health, err := StartHealth(cfg.HealthAddr, log, func() (bool, any) {
		ex := ex.Load()
		if ex == nil {
			return false, map[string]any{"role": "starting", "name": cfg.Name}
		}
		role := "standby"
		if ex.Active() {
			role = "active"
		}
		return ex.Ready(), map[string]any{"role": role, "name": cfg.Name, "position": ex.Position()}
	})
	if err != nil {
		return err
	}
	defer health.Stop()
	store, where, err := OpenStoreLogged(cfg.StoreURL, "", log)
	if err != nil {
		return err
	}
	defer store.Close()
	arch, err := openArchive(cfg.ArchiveDir, cfg.ArchiveSegmentEvents, log)
	if err != nil {
		return err
	}
	n, err := Start(context.WithoutCancel(ctx), store, Config{Standby: true, ExecutorName: cfg.Name, WorkerLease: cfg.WorkerLease, Logger: log,
		CheckpointEvery: cfg.CheckpointEvery, Archive: arch, ArchiveAfter: cfg.ArchiveAfter})
	if err != nil {
		return err
	}
	defer n.Stop()
	ex.Store(n.Executor)
	log.Info("turnstile executor started", "store", where, "position", n.Executor.Position(), "worker_lease", cfg.WorkerLease)
	follower := newLeaseFollower(cfg.Lease, log, n.Executor.SetActive)
	if err := follower.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done(): // SIGTERM
	case <-n.Executor.Done(): // the fold failed: give the lease up to a standby
	case <-follower.Done():
	}
	follower.Stop()
	if ctx.Err() == nil {
		return errors.New("the executor stopped following the log (see the log above); lease released")
	}
	log.Info("stopping")
	return nil
}

// WorkerProcessConfig says what a worker process runs.
type WorkerProcessConfig struct {
	StoreURL   string // a shared log (postgres://)
	ID         string // unique among running workers
	Slots      int
	Heartbeat  time.Duration
	Grace      time.Duration
	HealthAddr string        // "" serves no health endpoints
	Runners    runner.Config // the built-in runners this worker offers
	// MaxResultBytes bounds the result a run records (0: the default).
	MaxResultBytes int
	Logger         *slog.Logger
}

// RunWorker runs one worker until ctx ends, then drains it within Grace.
// It stops with an error when another process registers the same worker
// id and takes it over.
func RunWorker(ctx context.Context, cfg WorkerProcessConfig) error {
	log := cfg.Logger
	// The health listener is bound before anything acts.
	var wp atomic.Pointer[worker.Worker]
	health, err := StartHealth(cfg.HealthAddr, log, func() (bool, any) {
		w := wp.Load()
		if w == nil {
			return false, map[string]any{"id": cfg.ID, "status": "starting"}
		}
		select {
		case <-w.Superseded():
			return false, map[string]any{"id": cfg.ID, "superseded_by": w.SupersededBy()}
		default:
			return true, map[string]any{"id": cfg.ID, "incarnation": w.Incarnation(), "slots": cfg.Slots}
		}
	})
	if err != nil {
		return err
	}
	defer health.Stop()
	store, where, err := OpenStoreLogged(cfg.StoreURL, "", log)
	if err != nil {
		return err
	}
	defer store.Close()
	n, err := Start(context.WithoutCancel(ctx), store, Config{NoExecutor: true, WorkerIDs: []string{cfg.ID}, Slots: cfg.Slots,
		Heartbeat: cfg.Heartbeat, ForwardFromHead: true, StopGrace: cfg.Grace, Runners: cfg.Runners,
		MaxResultBytes: cfg.MaxResultBytes, Logger: log})
	if err != nil {
		return err
	}
	defer n.Stop()
	w := n.Workers[0]
	wp.Store(w)
	log.Info("turnstile worker started", "worker", cfg.ID, "incarnation", w.Incarnation(), "slots", cfg.Slots, "store", where)
	select {
	case <-ctx.Done():
		log.Info("draining", "grace", cfg.Grace)
		n.Drain(context.Background(), cfg.Grace)
		return nil
	case <-w.Superseded():
		n.Stop()
		return fmt.Errorf("worker %s: another process registered the same worker id (incarnation %s) and took over; this one stopped", cfg.ID, w.SupersededBy())
	}
}
