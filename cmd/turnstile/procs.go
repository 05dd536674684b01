package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/turnstile/turnstile/eventstore/postgres"
	"github.com/turnstile/turnstile/services/lease"
	"github.com/turnstile/turnstile/services/node"
)

// cmdExecutor runs the executor as a process of its own on a shared log.
// Any number may run at once: the one holding the lease decides, the others
// stand by with their fold current and take over when it goes.
func cmdExecutor(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlags("executor", stderr)
	storeURL := fs.String("store", os.Getenv("TURNSTILE_STORE"), "postgres:// store URL (also TURNSTILE_STORE)")
	name := fs.String("name", defaultName("executor"), "this executor's writer name in the log (distinct per process)")
	workerLease := fs.Duration("worker-lease", 15*time.Second, "how long a worker may go without an event in the log before it is declared lost")
	healthAddr := fs.String("health-addr", "", "serve /healthz and /readyz on this address (e.g. 0.0.0.0:8081; empty: none)")
	doMigrate := fs.Bool("migrate", false, "apply the PostgreSQL store's migrations before starting")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := sharedStore("executor", *storeURL); err != nil {
		return err
	}
	if *workerLease < 10*time.Millisecond {
		return usageError{errors.New("--worker-lease must be at least 10ms")}
	}
	l, err := executorLease(*storeURL)
	if err != nil {
		return usageError{err}
	}
	log := newLogger(stderr).With("executor", *name)
	if *doMigrate {
		if err := migrate(ctx, *storeURL, io.Discard); err != nil {
			return err
		}
	}
	store, where, err := openStore(*storeURL, "")
	if err != nil {
		return err
	}
	defer store.Close()
	n, err := node.Start(context.WithoutCancel(ctx), store, node.Config{Standby: true, ExecutorName: *name, WorkerLease: *workerLease, Logger: log})
	if err != nil {
		return err
	}
	defer n.Stop()
	ex := n.Executor
	stopHealth, err := serveHealth(*healthAddr, log, func() (bool, any) {
		role := "standby"
		if ex.Active() {
			role = "active"
		}
		return ex.Ready(), map[string]any{"role": role, "name": *name, "position": ex.Position()}
	})
	if err != nil {
		return err
	}
	defer stopHealth()
	log.Info("turnstile executor started", "store", where, "position", ex.Position(), "worker_lease", *workerLease)
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-ex.Done(): // the fold failed: give the lease up to a standby
			stop()
		case <-fctx.Done():
		}
	}()
	lease.Follow(fctx, l, log, ex.SetActive) // until SIGTERM: released on the way out, so a standby takes over at once
	if ctx.Err() == nil {
		return errors.New("the executor stopped following the log (see the log above); lease released")
	}
	log.Info("stopping")
	return nil
}

// cmdWorker runs one worker as a process of its own on a shared log.
func cmdWorker(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlags("worker", stderr)
	storeURL := fs.String("store", os.Getenv("TURNSTILE_STORE"), "postgres:// store URL (also TURNSTILE_STORE)")
	host, _ := os.Hostname()
	id := fs.String("id", host, "worker id, unique among running workers (a second process with the same id takes it over and the first stops)")
	slots := fs.Int("slots", 16, "executions this worker runs at once")
	heartbeat := fs.Duration("heartbeat", 2*time.Second, "lease renewal interval (keep it well below the executors' --worker-lease)")
	grace := fs.Duration("grace", 10*time.Second, "on SIGTERM, how long in-flight executions may run before they are failed")
	healthAddr := fs.String("health-addr", "", "serve /healthz and /readyz on this address (empty: none)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := sharedStore("worker", *storeURL); err != nil {
		return err
	}
	if *slots < 1 || *slots > 100_000 || *heartbeat < time.Millisecond || *id == "" {
		return usageError{errors.New("--id must be set, --slots must be 1..100000 and --heartbeat at least 1ms")}
	}
	log := newLogger(stderr)
	store, where, err := openStore(*storeURL, "")
	if err != nil {
		return err
	}
	defer store.Close()
	n, err := node.Start(context.WithoutCancel(ctx), store, node.Config{NoExecutor: true, WorkerIDs: []string{*id}, Slots: *slots,
		Heartbeat: *heartbeat, ForwardFromHead: true, StopGrace: *grace, Logger: log})
	if err != nil {
		return err
	}
	defer n.Stop()
	w := n.Workers[0]
	stopHealth, err := serveHealth(*healthAddr, log, func() (bool, any) {
		select {
		case <-w.Superseded():
			return false, map[string]any{"id": *id, "superseded_by": w.SupersededBy()}
		default:
			return true, map[string]any{"id": *id, "incarnation": w.Incarnation(), "slots": *slots}
		}
	})
	if err != nil {
		return err
	}
	defer stopHealth()
	log.Info("turnstile worker started", "worker", *id, "incarnation", w.Incarnation(), "slots", *slots, "store", where)
	select {
	case <-ctx.Done():
		log.Info("draining", "grace", *grace)
		n.Drain(context.Background(), *grace)
		return nil
	case <-w.Superseded():
		n.Stop()
		return fmt.Errorf("worker %s: another process registered the same worker id (incarnation %s) and took over; this one stopped", *id, w.SupersededBy())
	}
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
		return usageError{fmt.Errorf("%s runs as a process of its own only on a shared log (postgres://); %q is %s: use turnstile serve", cmd, redactURL(storeURL), kind)}
	}
	return nil
}

// executorLease returns the lease the executors of storeURL's log contend
// for: an advisory lock named after the log's schema, on a connection to
// the same database.
func executorLease(storeURL string) (*lease.Postgres, error) {
	u, err := url.Parse(storeURL)
	if err != nil {
		return nil, fmt.Errorf("store URL: %w", err)
	}
	q := u.Query()
	schema := q.Get("schema")
	if schema == "" {
		schema = pgSchema()
	}
	if schema == "" {
		schema = postgres.DefaultSchema
	}
	q.Del("schema") // ours, not a server setting
	u.RawQuery = q.Encode()
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		return nil, fmt.Errorf("store URL %s: %w", redactURL(storeURL), err)
	}
	return &lease.Postgres{Conn: cfg, Name: "turnstile executor " + schema}, nil
}

// defaultName is a name unique to this process: what@host:pid.
func defaultName(what string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s@%s:%d", what, host, os.Getpid())
}

// serveHealth serves GET /healthz (200 while the process runs) and GET
// /readyz (200 when ready says so, 503 otherwise; both with ready's details
// as JSON) on addr, if addr is not empty. stop shuts it down.
func serveHealth(addr string, log *slog.Logger, ready func() (bool, any)) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health address: %w", err)
	}
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, ok bool, details any) {
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": ok, "details": details})
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, details := ready()
		answer(w, true, details)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, details := ready()
		answer(w, ok, details)
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	log.Info("health endpoints", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}, nil
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
