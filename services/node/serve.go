// turnstile serve assembled: the log, the read model, the executor (alone,
// or contending for a lease), in-process workers and the API, started in
// order and stopped in reverse.

package node

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/archive"
	"github.com/turnstile/turnstile/eventstore/diskfs"
	"github.com/turnstile/turnstile/internal/startstop"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/archiver"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/lease"
	"github.com/turnstile/turnstile/services/remote"
	"github.com/turnstile/turnstile/services/runner"
)

// ServeConfig says what a serve process runs. The command line checks the
// flags; Serve trusts them.
type ServeConfig struct {
	StoreURL string // "" for the embedded store in DataDir
	DataDir  string
	Addr     string // the API's listen address (port 0: any free port)

	WorkerIDs []string // the in-process workers
	Slots     int      // executions each worker runs at once
	Grace     time.Duration

	// NoExecutor runs no executor here (API and workers only, on a
	// shared log where another process grants).
	NoExecutor bool
	// Lease, when set, is the lease the in-process executor contends for
	// (a shared PostgreSQL log): it stands by until it holds it.
	Lease        lease.Lease
	ExecutorName string
	WorkerLease  time.Duration
	// MaxWorkerNames and WorkerIdleTimeout are the remote workers'
	// remote.Config MaxNames and IdleTimeout (0: its defaults).
	MaxWorkerNames    int
	WorkerIdleTimeout time.Duration

	// SnapshotDir holds snapshots of the executor's fold and the read
	// model; "" is the embedded store's checkpoints/ directory, or none.
	SnapshotDir   string
	SnapshotEvery uint64
	RetainEnded   int           // ended executions the read model keeps (0: all)
	SQLViews      bool          // with a PostgreSQL store, keep the SQL read model tables
	Runners       runner.Config // the built-in runners the in-process workers offer
	// MaxResultBytes bounds the result a run records, whether an
	// in-process worker's or a remote worker's report (0:
	// domain.DefaultMaxResultBytes).
	MaxResultBytes int
	// CheckpointEvery is how much log time passes between the executor's
	// checkpoints in the log (0: none). ArchiveDir, if set, is the archive
	// (eventstore/archive): what the live log no longer holds answers from
	// it (Queries.WithArchive), and the archiver moves there the log before
	// the newest checkpoint at least ArchiveAfter old, in segments of
	// ArchiveSegmentEvents events (0: the archive's default). See
	// docs/log-over-months.md.
	CheckpointEvery      time.Duration
	ArchiveDir           string
	ArchiveAfter         time.Duration
	ArchiveSegmentEvents int

	// API builds the HTTP API on the process's parts.
	API  func(APIParts) http.Handler
	Auth bool // whether API asks for tokens (for the start's log line)

	// BodyTimeout bounds how long a request's body may take to arrive
	// (default 30s).
	BodyTimeout time.Duration

	Logger *slog.Logger
}

// APIParts is what the HTTP API serves from.
type APIParts struct {
	Commands *command.Service
	Queries  *projections.Queries
	// Ready reports whether the executor (if this process runs one) has
	// caught up with the log.
	Ready    func() bool
	Registry *prometheus.Registry
	Logger   *slog.Logger
	// Remote serves workers over HTTP (the worker routes).
	Remote *remote.Service
	// Archive counts the archive's segments for GET /api/v1/log; nil
	// until this process runs an archive (serve --archive).
	Archive interface {
		ArchivedSegments(ctx context.Context) (int, error)
	}
}

// Serve runs a serve process until ctx ends, then stops it: the API stops
// answering, the workers drain within Grace, then the executor and the
// read model stop and save their snapshots.
func Serve(ctx context.Context, cfg ServeConfig) error {
	log := cfg.Logger
	storeKind, storeWhere, err := Locate(cfg.StoreURL, cfg.DataDir)
	if err != nil {
		return err
	}
	// Other processes may write a PostgreSQL or KurrentDB log.
	shared := storeKind == "postgres" || storeKind == "kurrentdb"
	var snaps *projections.SnapshotFiles
	snapDir := cfg.SnapshotDir
	if snapDir == "" {
		snapDir = CheckpointDir(storeKind, storeWhere)
	}
	if snapDir != "" {
		snaps = &projections.SnapshotFiles{Dir: snapDir}
	}
	// Every listener is bound before any part acts: with the port taken,
	// nothing registers, grants or runs.
	api := &HTTPServer{Addr: cfg.Addr, Logger: log, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		BodyTimeout: cmp.Or(cfg.BodyTimeout, 30*time.Second)}
	if err := api.Listen(); err != nil {
		return fmt.Errorf("api address: %w", err)
	}
	defer api.Stop()
	// The read model's snapshot decodes while the log opens.
	var loadViews func(context.Context, eventstore.Store, *slog.Logger) *projections.Views
	if snaps != nil {
		loadViews = projections.ReadViews(*snaps)
	}
	store, where, err := OpenStoreLogged(cfg.StoreURL, cfg.DataDir, log)
	if err == nil && storeKind == "kurrentdb" {
		if eventstore.AtomicMultiStream(store) {
			log.Info("KurrentDB takes the fenced multi-stream path (AppendRecords: 26.0.3, 26.1 and later, one node); " +
				"proved against a fake gRPC server here, not against a real KurrentDB server")
		} else {
			log.Warn("this KurrentDB server has no atomic multi-stream appends with conditions: the executor and the commands " +
				"take their single-stream path (fence first, the rest after it, completed from the log after a crash); " +
				"proved against a fake gRPC server here, not against a real KurrentDB server")
		}
	}
	if err != nil {
		return err
	}
	defer store.Close()

	// The read model and the executor fold the log at the same time (two
	// folds, two cores); the API listens once both have caught up.
	views := projections.NewViews()
	if loadViews != nil {
		views = loadViews(ctx, store, log)
	}
	views, err = startViewsInLiveLog(ctx, store, views, log)
	if err != nil {
		return err
	}
	views.Retain(cfg.RetainEnded)
	arch, err := openArchive(cfg.ArchiveDir, cfg.ArchiveSegmentEvents, log)
	if err != nil {
		return err
	}
	if a, ok := arch.(*archive.Archive); ok {
		defer a.Close() // one archive: the archiver writes it, the API reads it
	}
	readModel := NewReadModel(views, store, snaps, cfg.SnapshotEvery, log)
	if err := readModel.Start(ctx); err != nil {
		return err
	}
	defer readModel.Stop()
	// The node outlives the signal: on SIGTERM its workers drain (see below).
	// One process owns an embedded log, so at start every worker it names
	// died with the previous run; a shared PostgreSQL or KurrentDB log has
	// other processes' workers, which only their leases can judge.
	n, err := Start(context.WithoutCancel(ctx), store, Config{WorkerIDs: cfg.WorkerIDs, Slots: cfg.Slots, LoseWorkers: !shared,
		CheckpointDir: CheckpointDir(storeKind, where), SnapshotDir: snapDir, SnapshotEvery: cfg.SnapshotEvery, Logger: log, StopGrace: cfg.Grace,
		NoExecutor: cfg.NoExecutor, Standby: cfg.Lease != nil, ExecutorName: cfg.ExecutorName, WorkerLease: cfg.WorkerLease, ForwardFromHead: shared,
		Runners: cfg.Runners, MaxResultBytes: cfg.MaxResultBytes, CheckpointEvery: cfg.CheckpointEvery, Archive: arch, ArchiveAfter: cfg.ArchiveAfter, Trimmed: views.ForgetBefore})
	if err != nil {
		return err
	}
	defer n.Stop()
	broken := storeFailed(store)
	ready := func() bool {
		select {
		case <-broken:
			return false // the embedded store takes no more appends
		default:
		}
		return n.Executor == nil || n.Executor.Ready()
	}
	if cfg.Lease != nil {
		// On a shared log the in-process executor is one of the contenders.
		follower := newLeaseFollower(cfg.Lease, log.With("executor", cfg.ExecutorName), n.Executor.SetActive)
		if err := follower.Start(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		defer follower.Stop()
	}
	if err := startstop.WaitAllStarted(ctx, readModel); err != nil {
		if rerr := readModel.Err(); rerr != nil {
			return rerr
		}
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "turnstile_bus_poison_messages_total",
		Help: "Bus messages set aside in the poison topic after their retries."}, func() float64 { return float64(n.Poison.Count()) }))
	if n.Executor != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "turnstile_executor_skipped_events_total",
			Help: "Events the executor's fold passed over because they did not decode (the audit lists them)."},
			func() float64 { return float64(n.Executor.Stats.Undecodable.Load()) }))
	}
	if storeKind == "postgres" && cfg.SQLViews {
		proj, err := newSQLViews(ctx, cfg.StoreURL, store, snaps, cfg.SnapshotEvery, cfg.RetainEnded, log)
		if err != nil {
			return err
		}
		if err := proj.Start(ctx); err != nil {
			return err
		}
		defer proj.Stop()
		reg.MustRegister(proj.Projector.Collector())
	}
	workers, err := remote.New(remote.Config{Store: store, Lease: cfg.WorkerLease, MaxNames: cfg.MaxWorkerNames, IdleTimeout: cfg.WorkerIdleTimeout, MaxResultBytes: cfg.MaxResultBytes, Logger: log})
	if err != nil {
		return err
	}
	if err := workers.Start(ctx); err != nil {
		return err
	}
	defer workers.Stop()
	parts := APIParts{Commands: n.Commands, Queries: projections.NewQueries(views, store), Ready: ready, Registry: reg, Logger: log, Remote: workers}
	if a, ok := arch.(*archive.Archive); ok && a != nil {
		history := archive.History{Archive: a, Live: store}
		parts.Queries.WithArchive(history)
		n.Commands.History = history // (before the API starts: no request reads it yet)
		parts.Archive = archiveStatus{history}
	}
	api.Handler = cfg.API(parts)
	if err := api.Start(ctx); err != nil {
		return err
	}
	log.Info("turnstile serving", "addr", api.ListenAddr(), "store", where, "workers", len(cfg.WorkerIDs), "slots", cfg.Slots, "executor", !cfg.NoExecutor,
		"position", views.Next(), "auth", cfg.Auth)

	select {
	case <-ctx.Done():
	case <-api.Done():
		return fmt.Errorf("http server: %w", api.Err())
	case <-readModel.Done():
		if err := readModel.Err(); err != nil {
			return err
		}
	case <-broken:
		// A write failed (a full disk, an I/O error): after a failed fsync
		// only a reopen can tell what is durable, so the process stops
		// (non-zero) and its restart recovers every acknowledged event.
		err := storeErr(store)
		log.Error("the log could not be written; stopping so that a restart recovers it (every acknowledged request is in the log; free space or fix the disk, then start again)",
			"err", err, "head", views.Next())
		api.Stop()
		n.Drain(context.Background(), 0) // nothing can be recorded: the runs are taken back after the restart
		return fmt.Errorf("the log could not be written; restart once the disk has room: %w", err)
	}
	log.Info("stopping")
	api.Stop() // ends the feeds first, so the shutdown does not wait for them
	log.Info("draining workers", "grace", cfg.Grace)
	n.Stop() // workers drain, then the executor and the bus stop (saving its snapshot)
	if snaps != nil {
		readModel.Stop()
		if err := views.SaveSnapshot(*snaps); err != nil {
			log.Warn("cannot save the read model's snapshot", "err", err)
		}
	}
	return nil
}

// openArchive opens the archive in dir for the archiver (nil: dir is ""),
// warning of entries readable by others than the owner.
func openArchive(dir string, segmentEvents int, log *slog.Logger) (archiver.Archive, error) {
	if dir == "" {
		return nil, nil
	}
	a, err := archive.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", dir, err)
	}
	diskfs.WarnLoose(log, "archive", dir)
	if segmentEvents > 0 {
		a.SetSegmentEvents(segmentEvents)
	}
	return a, nil
}

// newLeaseFollower returns the follower of lease l: from Start until Stop
// it contends for the lease and tells set whether it holds it (released on
// Stop, so a standby takes over at once).
func newLeaseFollower(l lease.Lease, log *slog.Logger, set func(active bool)) *startstop.Func {
	return startstop.NewFunc(func(ctx context.Context, started func()) error {
		started()
		lease.Follow(ctx, l, log, set)
		return nil
	})
}

// storeFailed returns a channel closed when store stops taking appends
// after a failed write (the embedded store's Failed); nil, never closed,
// for a store that recovers by itself (PostgreSQL: every part retries).
func storeFailed(store eventstore.Store) <-chan struct{} {
	if f, ok := store.(interface{ Failed() <-chan struct{} }); ok {
		return f.Failed()
	}
	return nil
}

// storeErr is why store stopped taking appends (storeFailed).
func storeErr(store eventstore.Store) error {
	if f, ok := store.(interface{ FailedErr() error }); ok {
		return f.FailedErr()
	}
	return nil
}
