package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/turnstile/turnstile/services/node"
)

// cmdExecutor runs the executor as a process of its own on a shared log.
// Any number may run at once: the one holding the lease decides, the others
// stand by with their fold current and take over when it goes.
func cmdExecutor(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlags("executor", stderr)
	storeURL := envString(fs, "store", "TURNSTILE_STORE", "", "postgres:// store URL")
	name := fs.String("name", defaultName("executor"), "this executor's writer name in the log (distinct per process)")
	workerLease := fs.Duration("worker-lease", 15*time.Second, "how long a worker that holds or was handed work may go without a sign of life in the log before it is declared lost (an idle worker writes nothing and is never lost)")
	healthAddr := fs.String("health-addr", "", "serve /healthz and /readyz on this address (e.g. 0.0.0.0:8081; empty: none)")
	doMigrate := fs.Bool("migrate", false, "apply the PostgreSQL store's migrations before starting")
	months := archiveFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := months.check(); err != nil {
		return usageError{err}
	}
	if err := sharedStore("executor", *storeURL); err != nil {
		return err
	}
	if *workerLease < 10*time.Millisecond {
		return usageError{errors.New("--worker-lease must be at least 10ms")}
	}
	l, err := node.ExecutorLease(*storeURL)
	if err != nil {
		return usageError{err}
	}
	log := newLogger(stderr).With("executor", *name)
	if *doMigrate {
		if err := migrate(ctx, *storeURL, io.Discard); err != nil {
			return err
		}
	}
	return node.RunExecutor(ctx, node.ExecutorProcessConfig{StoreURL: *storeURL, Name: *name, Lease: l, WorkerLease: *workerLease,
		HealthAddr: *healthAddr, Logger: log, CheckpointEvery: *months.checkpointEvery, ArchiveDir: *months.dir, ArchiveAfter: *months.after,
		ArchiveSegmentEvents: *months.segmentEvents})
}

// cmdWorker runs one worker as a process of its own on a shared log.
func cmdWorker(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlags("worker", stderr)
	storeURL := envString(fs, "store", "TURNSTILE_STORE", "", "postgres:// store URL")
	host, _ := os.Hostname()
	id := fs.String("id", host, "worker id, unique among running workers (a second process with the same id takes it over and the first stops)")
	slots := fs.Int("slots", 16, "executions this worker runs at once")
	heartbeat := fs.Duration("heartbeat", 2*time.Second, "how often the worker looks at its lease: it writes a heartbeat once it has owed one for two intervals, else it only reads its stream (keep three intervals well below the executors' --worker-lease)")
	grace := fs.Duration("grace", 10*time.Second, "on SIGTERM, how long in-flight executions may run before they are handed back (run again after the restart, within max_attempts); a second SIGTERM stops at once")
	healthAddr := fs.String("health-addr", "", "serve /healthz and /readyz on this address (empty: none)")
	server := fs.String("server", "", "serve over HTTP: the turnstile server's URL (then no --store: the worker needs a token of role worker, no database credentials)")
	token := fs.String("token", "", "with --server: a token of role worker (default: $TURNSTILE_TOKEN)")
	runnerCfg := runnerFlags(fs)
	maxResult := maxResultFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	runners, err := runnerCfg()
	if err != nil {
		return err
	}
	maxResultBytes, err := maxResult()
	if err != nil {
		return err
	}
	if *server != "" {
		if isSet(fs, "store") {
			return usageError{errors.New("worker: --server and --store exclude each other")}
		}
		if isSet(fs, "max-result-bytes") {
			return usageError{errors.New("worker: with --server the server's --max-result-bytes bounds the results (a larger one is reported failed)")}
		}
		if *token == "" {
			*token = os.Getenv("TURNSTILE_TOKEN")
		}
		if *slots < 1 || *slots > 100_000 || *id == "" {
			return usageError{errors.New("--id must be set and --slots must be 1..100000")}
		}
		return runRemoteWorker(ctx, remoteWorkerConfig{Server: *server, Token: *token, Name: *id, Slots: *slots, Grace: *grace, Runners: runners, Logger: newLogger(stderr)})
	}
	if err := sharedStore("worker", *storeURL); err != nil {
		return err
	}
	if *slots < 1 || *slots > 100_000 || *heartbeat < time.Millisecond || *id == "" {
		return usageError{errors.New("--id must be set, --slots must be 1..100000 and --heartbeat at least 1ms")}
	}
	return node.RunWorker(ctx, node.WorkerProcessConfig{StoreURL: *storeURL, ID: *id, Slots: *slots, Heartbeat: *heartbeat, Grace: *grace,
		HealthAddr: *healthAddr, Runners: runners, MaxResultBytes: maxResultBytes, Logger: newLogger(stderr)})
}

// isSet reports whether flag name was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// sharedStore checks that storeURL is a log several processes can share.
func sharedStore(cmd, storeURL string) error {
	if storeURL == "" {
		return usageError{fmt.Errorf("%s needs --store postgres://… (a log that several processes share)", cmd)}
	}
	kind, _, err := storeLocation(storeURL, "")
	if err != nil {
		return err
	}
	if kind != "postgres" {
		return usageError{fmt.Errorf("%s runs as a process of its own only on a shared log (postgres://); %q is %s: use turnstile serve", cmd, node.RedactURL(storeURL), kind)}
	}
	return nil
}

// defaultName is a name unique to this process: what@host:pid.
func defaultName(what string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s@%s:%d", what, host, os.Getpid())
}

// cmdHealthcheck GETs a URL and succeeds on a 2xx answer: a health check for
// images without curl (docker-compose.yaml).
func cmdHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("healthcheck", stderr)
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("usage: turnstile healthcheck [--timeout 3s] URL")}
	}
	target := fs.Arg(0)
	if u, err := url.Parse(target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError{fmt.Errorf("healthcheck: %q is not an http(s) URL", target)}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return usageError{err}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Fprintf(stdout, "%d %s\n", resp.StatusCode, strings.TrimSpace(string(body)))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %d", target, resp.StatusCode)
	}
	return nil
}
