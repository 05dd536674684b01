package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/eventstore/kurrentdb"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/eventstore/postgres"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/bus"
	"github.com/turnstile/turnstile/services/lease"
	"github.com/turnstile/turnstile/services/node"
)

func openStore(storeURL, dataDir string) (eventstore.Store, string, error) {
	kind, where, err := storeLocation(storeURL, dataDir)
	if err != nil {
		return nil, "", err
	}
	switch kind {
	case "embedded":
		addSyncProc()
		// The data directory holds the log in log/ and checkpoints in checkpoints/.
		s, err := embedded.Open(filepath.Join(where, "log"), embedded.Options{})
		if err != nil {
			return nil, "", fmt.Errorf("open embedded store in %s: %w", where, err)
		}
		return s, where, nil
	case "memory":
		return memstore.New(memstore.Options{}), "", nil
	case "postgres":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := postgres.OpenURL(ctx, storeURL, postgres.Options{Schema: pgSchema()})
		if err != nil {
			return nil, "", fmt.Errorf("open postgres store: %w", err)
		}
		return s, redactURL(storeURL), nil
	case "kurrentdb":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := kurrentdb.OpenURL(ctx, storeURL)
		if err != nil {
			return nil, "", fmt.Errorf("open kurrentdb store: %w", err)
		}
		return s, "kurrentdb", nil
	}
	return nil, "", fmt.Errorf("store kind %q not supported", kind)
}

// addSyncProc gives the Go scheduler one P (a slot to run goroutines in)
// more than it takes by itself, once, unless GOMAXPROCS is set. The
// embedded store's committer spends about a third of its time in
// fdatasync, and Go hands the P of a goroutine blocked in a system call to
// another thread only once its monitor has seen the call twice, which
// under load often takes longer than an fdatasync (0.2–1 ms here): the
// core sits idle meanwhile. With one P more the other goroutines keep
// every core busy (bench lifecycle: 4–11 % more executions/s, request →
// running p99 41–89 → 31–37 ms; BENCHMARKS.md, "Session 6").
func addSyncProc() {
	syncProcOnce.Do(func() {
		if os.Getenv("GOMAXPROCS") == "" {
			runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1)
		}
	})
}

var syncProcOnce sync.Once

// checkpointDir is where serve keeps the forwarder's checkpoint and the
// snapshots of its folds: in the embedded store's data directory, or in
// memory ("", no snapshots) for other stores.
func checkpointDir(kind, where string) string {
	if kind == "embedded" {
		return filepath.Join(where, "checkpoints")
	}
	return ""
}

// pgSchema is the PostgreSQL schema that holds the log: TURNSTILE_PG_SCHEMA,
// or the store's default.
func pgSchema() string { return os.Getenv("TURNSTILE_PG_SCHEMA") }

// redactURL hides a URL's password, for logs.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// cmdMigrate brings a PostgreSQL store's schema up to date. It is safe to
// run from several processes at once; serve runs it with --migrate.
func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("migrate", stderr)
	storeURL := fs.String("store", os.Getenv("TURNSTILE_STORE"), "postgres:// store URL")
	if err := parse(fs, args); err != nil {
		return err
	}
	return migrate(ctx, *storeURL, stdout)
}

func migrate(ctx context.Context, storeURL string, out io.Writer) error {
	kind, _, err := storeLocation(storeURL, "")
	if err != nil {
		return err
	}
	if kind != "postgres" {
		return usageError{fmt.Errorf("only a postgres:// store has migrations (got %q)", kind)}
	}
	applied, err := postgres.MigrateURL(ctx, storeURL, pgSchema())
	if err != nil {
		return fmt.Errorf("migrate %s: %w", redactURL(storeURL), err)
	}
	for _, m := range applied {
		fmt.Fprintf(out, "applied migration %d: %s\n", m.Version, m.Name)
	}
	fmt.Fprintf(out, "schema at version %d\n", postgres.SchemaVersion())
	return migrateSQLViews(ctx, storeURL, out)
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
	workerPrefix := fs.String("worker-prefix", "local", "the in-process workers are PREFIX-1 … PREFIX-N; on a shared log each serve needs its own prefix, the same at every restart")
	runExecutor := fs.Bool("executor", true, "run an executor in this process (on PostgreSQL it contends for the lease with every other executor; false: API and workers only)")
	executorName := fs.String("executor-name", "", "the in-process executor's writer name in the log (default \"executor\"; on PostgreSQL executor@host:pid)")
	workerLease := fs.Duration("worker-lease", 15*time.Second, "how long a worker may go without an event in the log before the executor declares it lost")
	slots := fs.Int("slots", 16, "executions each worker runs at once")
	doMigrate := fs.Bool("migrate", false, "apply the PostgreSQL store's migrations before starting")
	snapDir := fs.String("snapshots", "", "directory for snapshots of the executor's fold and the read model (default: checkpoints/ in --data for the embedded store, none for others)")
	retainEnded := fs.Int("retain-ended", 0, "keep only this many ended executions in the read model (the most recently ended; older ones are served from the log one at a time and left out of lists); 0 keeps all")
	snapEvery := fs.Uint64("snapshot-every", 500_000, "events folded between snapshots (one is also saved at a clean stop)")
	grace := fs.Duration("grace", 10*time.Second, "on SIGTERM, how long in-flight executions may run before they are failed")
	debugAddr := fs.String("debug-addr", "", "serve Go's profiles (net/http/pprof, /debug/pprof/) on this address, apart from the API and without auth; loopback addresses only")
	sqlViews := fs.Bool("sql-views", true, "with a postgres:// store, keep the executions and queue_stats tables (see README)")
	var tokens tokenFlags
	fs.Var(&tokens, "token", "ROLE:SECRET bearer token (repeatable; also TURNSTILE_TOKENS=ROLE:SECRET,...); visible to local users in the process's argv: prefer --token-file")
	tokenFile := fs.String("token-file", "", "read bearer tokens from FILE, one ROLE:SECRET (or ROLE:NAME:SECRET) a line; mode 0600 (see docs/security.md)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *tokenFile != "" {
		specs, err := api.ReadTokenFile(*tokenFile)
		if err != nil {
			return usageError{err}
		}
		tokens = append(tokens, specs...)
	}
	if *workers < 0 || *slots < 1 || *workerLease < 10*time.Millisecond {
		return usageError{errors.New("--workers must be >= 0, --slots >= 1 and --worker-lease >= 10ms")}
	}
	var workerIDs []string
	for i := range *workers {
		id := fmt.Sprintf("%s-%d", *workerPrefix, i+1)
		if *workerPrefix == "" || eventstore.ValidateStream(domain.WorkerStream(id)) != nil {
			return usageError{fmt.Errorf("--worker-prefix %q does not make a valid worker id", *workerPrefix)}
		}
		workerIDs = append(workerIDs, id)
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
	storeKind, storeWhere, err := storeLocation(*storeURL, *data)
	if err != nil {
		return err
	}
	log := newLogger(stderr)
	if *debugAddr != "" {
		stopDebug, err := serveDebug(*debugAddr, log)
		if err != nil {
			return usageError{err}
		}
		defer stopDebug()
	}
	if storeKind == "kurrentdb" {
		log.Warn("KurrentDB has no atomic multi-stream appends: the executor and the commands take their single-stream path " +
			"(fence first, the rest after it, completed from the log after a crash). That path is tested here against an " +
			"in-memory store without multi-stream appends and the store against a fake gRPC server, not against a real KurrentDB server")
	}
	// Other processes may write a PostgreSQL or KurrentDB log; executors
	// contend for a lease only on PostgreSQL.
	shared, leased := storeKind == "postgres" || storeKind == "kurrentdb", storeKind == "postgres"
	if !*runExecutor && !leased {
		return usageError{errors.New("--executor=false needs a shared log (postgres://) where a `turnstile executor` runs; on this store nothing would grant")}
	}
	var execLease *lease.Postgres
	if *runExecutor && leased {
		if execLease, err = executorLease(*storeURL); err != nil {
			return usageError{err}
		}
		if *executorName == "" {
			*executorName = defaultName("executor")
		}
	}
	if *doMigrate {
		if err := migrate(ctx, *storeURL, io.Discard); err != nil {
			return err
		}
	}
	// The read model's snapshot decodes while the log opens.
	if *retainEnded < 0 {
		return usageError{errors.New("--retain-ended must be >= 0")}
	}
	if *snapEvery == 0 {
		return usageError{errors.New("--snapshot-every must be > 0")}
	}
	snaps := projections.SnapshotFiles{Dir: *snapDir}
	if snaps.Dir == "" {
		snaps.Dir = checkpointDir(storeKind, storeWhere)
	}
	var loadViews func(context.Context, eventstore.Store, *slog.Logger) *projections.Views
	if snaps.Dir != "" {
		loadViews = projections.ReadViews(snaps)
	}
	store, where, err := openStore(*storeURL, *data)
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
	views.Retain(*retainEnded)
	caught := make(chan error, 1)
	go func() { caught <- views.CatchUp(ctx, store) }()
	// The node outlives the signal: on SIGTERM its workers drain (see below).
	// One process owns an embedded log, so at start every worker it names
	// died with the previous run; a shared PostgreSQL or KurrentDB log has
	// other processes' workers, which only their leases can judge.
	n, err := node.Start(context.WithoutCancel(ctx), store, node.Config{Workers: *workers, WorkerIDs: workerIDs, Slots: *slots, LoseWorkers: !shared,
		CheckpointDir: checkpointDir(storeKind, where), SnapshotDir: snaps.Dir, SnapshotEvery: *snapEvery, Logger: log, StopGrace: *grace,
		NoExecutor: !*runExecutor, Standby: execLease != nil, ExecutorName: *executorName, WorkerLease: *workerLease, ForwardFromHead: shared})
	if err != nil {
		return err
	}
	defer n.Stop()
	ready := func() bool { return true }
	if n.Executor != nil {
		ready = n.Executor.Ready
	}
	if execLease != nil {
		// On a shared log the in-process executor is one of the contenders.
		followCtx, stopFollowing := context.WithCancel(context.WithoutCancel(ctx))
		followed := make(chan struct{})
		go func() {
			defer close(followed)
			lease.Follow(followCtx, execLease, log.With("executor", *executorName), n.Executor.SetActive)
		}()
		defer func() { stopFollowing(); <-followed }()
	}
	if err := <-caught; err != nil {
		return fmt.Errorf("fold the log into the read model: %w", err)
	}
	viewsDone := make(chan error, 1)
	viewsCtx, stopViews := context.WithCancel(ctx)
	defer stopViews()
	go func() { viewsDone <- views.Run(viewsCtx, store) }()
	if snaps.Dir != "" {
		go views.KeepSnapshots(viewsCtx, snaps, *snapEvery, log)
	}
	// The feeds on the bus, for programs inside the deployment.
	feedBus := bus.NewFeedBus(log)
	defer feedBus.Close()
	go func() {
		fp := &bus.FeedPublisher{Store: store, Views: views, Publisher: feedBus.Publisher, Logger: log}
		if err := fp.Run(viewsCtx); err != nil {
			log.Error("feed publisher stopped", "err", err)
		}
	}()

	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "turnstile_bus_poison_messages_total",
		Help: "Bus messages set aside in the poison topic after their retries."}, func() float64 { return float64(n.Poison.Count()) }))
	if n.Executor != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "turnstile_executor_skipped_events_total",
			Help: "Events the executor's fold passed over because they did not decode (the audit lists them)."},
			func() float64 { return float64(n.Executor.Stats.Undecodable.Load()) }))
	}
	if storeKind == "postgres" && *sqlViews {
		var projSnaps *projections.SnapshotFiles
		if snaps.Dir != "" {
			projSnaps = &snaps
		}
		proj, stopProj, err := startSQLViews(viewsCtx, *storeURL, store, projSnaps, *snapEvery, *retainEnded, log)
		if err != nil {
			return err
		}
		defer stopProj()
		reg.MustRegister(proj.Collector())
	}
	srv := api.New(api.Config{Commands: n.Commands, Queries: projections.NewQueries(views, store), Tokens: toks, Logger: log,
		Ready: ready, Version: version, Registry: reg})
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
	log.Info("turnstile serving", "addr", ln.Addr().String(), "store", where, "workers", *workers, "slots", *slots, "executor", *runExecutor,
		"position", views.Next(), "auth", !toks.Empty())

	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("http server: %w", err)
	case err := <-viewsDone:
		if err != nil {
			return fmt.Errorf("read model stopped: %w", err)
		}
		viewsDone <- nil // for the wait below
	}
	log.Info("stopping")
	cancelBase() // ends the feeds, so Shutdown does not wait for them
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutCtx); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	log.Info("draining workers", "grace", *grace)
	n.Stop() // workers drain, then the executor and the bus stop (saving its snapshot)
	if snaps.Dir != "" {
		stopViews()
		<-viewsDone
		if err := views.SaveSnapshot(snaps); err != nil {
			log.Warn("cannot save the read model's snapshot", "err", err)
		}
	}
	return nil
}
