package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/postgres"
	"github.com/turnstile/turnstile/services/lease"
	"github.com/turnstile/turnstile/services/node"
	"github.com/turnstile/turnstile/services/remote"
)

// openStore opens the store --store (or --data) names (node.OpenStore).
func openStore(storeURL, dataDir string) (eventstore.Store, string, error) {
	store, where, err := node.OpenStore(storeURL, dataDir)
	return store, where, asUsage(err)
}

// storeLocation resolves --store and --data into a backend and a location
// (node.Locate).
func storeLocation(storeURL, dataDir string) (kind, where string, err error) {
	kind, where, err = node.Locate(storeURL, dataDir)
	return kind, where, asUsage(err)
}

// asUsage makes a configuration the process cannot start with a usage
// error (exit 2).
func asUsage(err error) error {
	if ce := (node.ConfigError{}); errors.As(err, &ce) {
		return usageError{err}
	}
	return err
}

// cmdMigrate brings a PostgreSQL store's schema up to date. It is safe to
// run from several processes at once; serve runs it with --migrate.
func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("migrate", stderr)
	storeURL := envString(fs, "store", "TURNSTILE_STORE", "", "postgres:// store URL")
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
	applied, err := postgres.MigrateURL(ctx, storeURL, node.PGSchema())
	if err != nil {
		return fmt.Errorf("migrate %s: %w", node.RedactURL(storeURL), err)
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

// stringsFlag is a repeatable string flag.
type stringsFlag []string

func (t *stringsFlag) String() string     { return strings.Join(*t, ",") }
func (t *stringsFlag) Set(v string) error { *t = append(*t, v); return nil }

func cmdServe(ctx context.Context, args []string, stderr interface{ Write([]byte) (int, error) }) error {
	fs := newFlags("serve", stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "HTTP listen address (port 0: any free port, printed at start)")
	data := fs.String("data", "./data", "data directory of the embedded store")
	storeURL := fs.String("store", "", "store URL (default: the embedded store in --data)")
	workers := fs.Int("workers", 2, "in-process workers")
	workerPrefix := fs.String("worker-prefix", "local", "the in-process workers are PREFIX-1 … PREFIX-N; on a shared log each serve needs its own prefix, the same at every restart")
	runExecutor := fs.Bool("executor", true, "run an executor in this process (on PostgreSQL it contends for the lease with every other executor; false: API and workers only)")
	executorName := fs.String("executor-name", "", "the in-process executor's writer name in the log (default \"executor\"; on PostgreSQL executor@host:pid)")
	workerLease := fs.Duration("worker-lease", 15*time.Second, "how long a worker that holds or was handed work may go without a sign of life in the log before the executor declares it lost (an idle worker writes nothing and is never lost)")
	slots := fs.Int("slots", 16, "executions each worker runs at once")
	maxWorkerNames := fs.Int("max-worker-names", remote.DefaultMaxNames, "live remote worker names one token may hold (a registration of another name beyond it is a 429); 0: no bound")
	workerIdle := fs.Duration("worker-idle-timeout", remote.DefaultIdleTimeout, "a remote worker's session that holds nothing and makes no request for this long ends, and its incarnation is recorded stopped")
	doMigrate := fs.Bool("migrate", false, "apply the PostgreSQL store's migrations before starting")
	snapDir := fs.String("snapshots", "", "directory for snapshots of the executor's fold and the read model (default: checkpoints/ in --data for the embedded store, none for others)")
	retainEnded := fs.Int("retain-ended", 0, "keep only this many ended executions in the read model (the most recently ended; older ones are served from the log one at a time and left out of lists); 0 keeps all")
	snapEvery := fs.Uint64("snapshot-every", 500_000, "events folded between snapshots (one is also saved at a clean stop)")
	grace := fs.Duration("grace", 10*time.Second, "on SIGTERM, how long in-flight executions may run before they are handed back (run again after the restart, within max_attempts); a second SIGTERM stops at once")
	debugAddr := fs.String("debug-addr", "", "serve Go's profiles (net/http/pprof, /debug/pprof/) on this address, apart from the API and without auth; loopback addresses only")
	sqlViews := fs.Bool("sql-views", true, "with a postgres:// store, keep the executions and queue_stats tables (see docs/operations.md)")
	var tokens tokenFlags
	fs.Var(&tokens, "token", "ROLE:NAME:SECRET[:scope=PREFIX] bearer token (repeatable; also TURNSTILE_TOKENS=...,...; ROLE:SECRET is named ROLE-<hash prefix>); visible to local users in the process's argv: prefer --token-file")
	tokenFile := fs.String("token-file", "", "read bearer tokens from FILE, one ROLE:SECRET (or ROLE:NAME:SECRET) a line; mode 0600 (see docs/security.md)")
	var corsOrigins stringsFlag
	fs.Var(&corsOrigins, "cors-origin", "let browser pages of this origin (scheme://host[:port], or *) call the API and open its feeds (repeatable; see docs/security.md)")
	otlpEndpoint := fs.String("otlp-endpoint", "", "export traces over OTLP/HTTP to this collector (http://host:4318; also OTEL_EXPORTER_OTLP_ENDPOINT); off by default")
	feeds := feedFlags(fs)
	runnerCfg := runnerFlags(fs)
	maxResult := maxResultFlag(fs)
	months := archiveFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := feeds.check(); err != nil {
		return usageError{err}
	}
	if err := months.check(); err != nil {
		return usageError{err}
	}
	for _, o := range corsOrigins {
		if err := api.ValidateCORSOrigin(o); err != nil {
			return usageError{err}
		}
	}
	runners, err := runnerCfg()
	if err != nil {
		return err
	}
	maxResultBytes, err := maxResult()
	if err != nil {
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
	if *maxWorkerNames < 0 || *workerIdle < 10*time.Millisecond {
		return usageError{errors.New("--max-worker-names must be >= 0 and --worker-idle-timeout >= 10ms")}
	}
	if *maxWorkerNames == 0 {
		*maxWorkerNames = -1 // no bound
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
	storeKind, _, err := storeLocation(*storeURL, *data)
	if err != nil {
		return err
	}
	log := newLogger(stderr)
	stopTraces, err := startTraces(ctx, *otlpEndpoint, log)
	if err != nil {
		return err
	}
	defer stopTraces()
	if *debugAddr != "" {
		stopDebug, err := serveDebug(*debugAddr, log)
		if err != nil {
			return usageError{err}
		}
		defer stopDebug()
	}
	// Executors contend for a lease only on PostgreSQL.
	leased := storeKind == "postgres"
	if !*runExecutor && !leased {
		return usageError{errors.New("--executor=false needs a shared log (postgres://) where a `turnstile executor` runs; on this store nothing would grant")}
	}
	var execLease lease.Lease
	if *runExecutor && leased {
		l, err := node.ExecutorLease(*storeURL)
		if err != nil {
			return usageError{err}
		}
		execLease = l
		if *executorName == "" {
			*executorName = defaultName("executor")
		}
	}
	if *doMigrate {
		if err := migrate(ctx, *storeURL, io.Discard); err != nil {
			return err
		}
	}
	if *retainEnded < 0 {
		return usageError{errors.New("--retain-ended must be >= 0")}
	}
	if *snapEvery == 0 {
		return usageError{errors.New("--snapshot-every must be > 0")}
	}
	return node.Serve(ctx, node.ServeConfig{StoreURL: *storeURL, DataDir: *data, Addr: *addr, WorkerIDs: workerIDs, Slots: *slots, Grace: *grace,
		NoExecutor: !*runExecutor, Lease: execLease, ExecutorName: *executorName, WorkerLease: *workerLease,
		MaxWorkerNames: *maxWorkerNames, WorkerIdleTimeout: *workerIdle,
		SnapshotDir: *snapDir, SnapshotEvery: *snapEvery, RetainEnded: *retainEnded, SQLViews: *sqlViews, Runners: runners, MaxResultBytes: maxResultBytes,
		CheckpointEvery: *months.checkpointEvery, ArchiveDir: *months.dir, ArchiveAfter: *months.after, ArchiveSegmentEvents: *months.segmentEvents,
		API: func(p node.APIParts) http.Handler {
			return api.New(api.Config{Commands: p.Commands, Queries: p.Queries, Tokens: toks, Logger: p.Logger, CORSOrigins: corsOrigins, Remote: p.Remote, Archive: p.Archive,
				MaxFeeds: feeds.max, MaxFeedsPerToken: feeds.perToken, FeedStallTimeout: feeds.stall,
				Ready: p.Ready, Version: buildVersion().Version, Registry: p.Registry}).Handler()
		},
		Auth: !toks.Empty(), Logger: log})
}
