package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/postgres"
	"github.com/turnstile/turnstile/internal/startstop"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/node"
)

// benchResult is the last line `turnstile bench lifecycle --json` prints.
type benchResult struct {
	Executions     int     `json:"executions"`
	Seconds        float64 `json:"seconds"`
	ExecutionsPerS float64 `json:"executions_per_s"`
	P50Millis      float64 `json:"p50_ms"`
	P99Millis      float64 `json:"p99_ms"`
	PeakRSSBytes   int64   `json:"peak_rss_bytes"`
	Events         uint64  `json:"events"`
	Store          string  `json:"store"`
	Rate           float64 `json:"rate,omitempty"` // requests per second asked for (0: unpaced)
	// Subscription lag: commit time of each terminal event to its delivery
	// to a subscription of the benchmark's own.
	LagP50Millis float64 `json:"subscription_lag_p50_ms"`
	LagP99Millis float64 `json:"subscription_lag_p99_ms"`
	// The mixed run's flags (absent in a plain run): --priorities,
	// --keys, --total.
	Priorities         int `json:"priorities,omitempty"`
	Keys               int `json:"keys,omitempty"`
	MaxConcurrentTotal int `json:"max_concurrent_total,omitempty"`
}

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "restart" {
		return cmdBenchRestart(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "waiting" {
		return cmdBenchWaiting(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "months" {
		return cmdBenchMonths(ctx, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "lifecycle" {
		return usageError{errors.New("usage: turnstile bench lifecycle|waiting|restart|months [flags] (see BENCHMARKS.md)")}
	}
	fs := newFlags("bench lifecycle", stderr)
	storeURL := fs.String("store", "", "store URL (default: a fresh embedded store in a temporary directory)")
	n := fs.Int("executions", 100_000, "executions to drive through the lifecycle")
	actions := fs.Int("actions", 100, "actions (each with its own FIFO queue)")
	maxConc := fs.Int("max-concurrent", 10, "max_concurrent of every action")
	submitters := fs.Int("submitters", 64, "goroutines requesting executions one by one")
	rate := fs.Float64("rate", 0, "requests per second, paced evenly (0: as fast as the submitters go); below the system's throughput, request → running measures a free slot's latency")
	workers := fs.Int("workers", 4, "in-process workers")
	remoteN := fs.Int("remote", 0, "instead of in-process workers, this many workers of the Go worker package reaching the API over loopback HTTP")
	slots := fs.Int("slots", 0, "slots per worker (default: enough for every action's limit; with --keys, its total or every value's limit)")
	asJSON := fs.Bool("json", false, "print the result as one JSON line last")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	memProfile := fs.String("memprofile", "", "write an allocation profile of the run to this file (go tool pprof -sample_index=alloc_space)")
	mix := addBenchMixFlags(fs)
	traceFile := fs.String("trace", "", "write an execution trace of the run to this file (go tool trace; -pprof=sched, sync or syscall for where goroutines wait)")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if *n < 1 || *actions < 1 || *maxConc < 1 || *submitters < 1 || *workers < 1 {
		return usageError{errors.New("--executions, --actions, --max-concurrent, --submitters and --workers must be >= 1")}
	}
	if *rate < 0 {
		return usageError{errors.New("--rate must be >= 0")}
	}
	if err := mix.check(); err != nil {
		return err
	}
	if *remoteN > 0 {
		*workers = *remoteN
	}
	if *slots == 0 {
		*slots = (*actions*mix.perAction(*maxConc) + *workers - 1) / *workers
	}
	where, cleanup, err := benchStoreURL(*storeURL)
	if err != nil {
		return err
	}
	defer cleanup()
	store, _, err := openStore(where, "")
	if err != nil {
		return err
	}
	defer store.Close()
	log := newLogger(stderr)
	inProcess := *workers
	if *remoteN > 0 {
		inProcess = 0
	}
	nd, err := node.Start(ctx, store, node.Config{Workers: inProcess, Slots: *slots, Logger: log})
	if err != nil {
		return err
	}
	defer nd.Stop()
	if *remoteN > 0 {
		stopRemote, err := startBenchRemote(ctx, store, nd.Commands, *remoteN, *slots, log)
		if err != nil {
			return err
		}
		defer stopRemote()
	}
	for i := 0; i < *actions; i++ {
		p := domain.Policy{Ref: fmt.Sprintf("bench.%d", i), Runner: "core.noop", MaxConcurrent: *maxConc, MaxQueueLength: domain.MaxQueueLengthLimit}
		if _, err := nd.Commands.DefineAction(ctx, mix.policy(p)); err != nil {
			return err
		}
	}
	startHead, err := store.Head(ctx)
	if err != nil {
		return err
	}

	// Count ends from the log itself, and measure the subscription's lag:
	// from an event's commit time (the store's clock, this machine's) to its
	// delivery here.
	var ended atomic.Int64
	var lags []float64 // ms; only the subscription goroutine appends until doneCh
	doneCh := make(chan struct{})
	subCtx, cancelSub := context.WithCancel(ctx)
	defer cancelSub()
	go func() {
		_ = store.Subscribe(subCtx, startHead, eventstore.Filter{Types: []string{
			domain.TypeExecutionCompleted, domain.TypeExecutionFailed, domain.TypeExecutionTimedOut,
			domain.TypeExecutionCancelled, domain.TypeExecutionRejected}}, func(b []domain.Envelope) error {
			now := time.Now()
			for i := range b {
				lags = append(lags, float64(now.Sub(b[i].Time).Microseconds())/1000)
			}
			if ended.Add(int64(len(b))) >= int64(*n) {
				close(doneCh)
				return errors.New("done")
			}
			return nil
		})
	}()

	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	stopTrace, err := startTrace(*traceFile)
	if err != nil {
		return err
	}
	defer stopTrace()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, *submitters)
	for s := 0; s < *submitters; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(*n) {
					return
				}
				if *rate > 0 { // request i is due at start + i/rate
					if d := time.Until(start.Add(time.Duration(float64(i) / *rate * float64(time.Second)))); d > 0 {
						time.Sleep(d)
					}
				}
				r := mix.request(command.Request{Action: fmt.Sprintf("bench.%d", i%int64(*actions))}, i)
				if _, _, err := nd.Commands.Request(ctx, r); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("request: %w", err)
	}
	select {
	case <-doneCh:
	case <-ctx.Done():
		return ctx.Err()
	}
	elapsed := time.Since(start)
	stopProfile()
	stopTrace()
	if *memProfile != "" {
		if err := writeHeapProfile(*memProfile); err != nil {
			return err
		}
	}

	p50, p99, events, err := requestToRunning(ctx, store, startHead)
	if err != nil {
		return err
	}
	sort.Float64s(lags)
	lagQ := func(p float64) float64 { return lags[min(len(lags)-1, int(p*float64(len(lags))))] }
	res := benchResult{
		LagP50Millis: round(lagQ(0.50), 3), LagP99Millis: round(lagQ(0.99), 3),
		Executions: *n, Seconds: round(elapsed.Seconds(), 3), ExecutionsPerS: round(float64(*n)/elapsed.Seconds(), 1),
		P50Millis: round(p50, 3), P99Millis: round(p99, 3), PeakRSSBytes: peakRSS(), Events: events, Store: strings.SplitN(where, ":", 2)[0], Rate: *rate,
		Priorities: mix.priorities, Keys: mix.keys, MaxConcurrentTotal: mix.total,
	}
	if *asJSON {
		b, _ := json.Marshal(res)
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	fmt.Fprintf(stdout, "executions:        %d in %.3f s\nthroughput:        %.1f executions/s\nrequest → running: p50 %.3f ms, p99 %.3f ms (log commit times)\nsubscription lag:  p50 %.3f ms, p99 %.3f ms (commit → delivery)\nevents written:    %d\npeak RSS:          %.1f MiB\n",
		res.Executions, res.Seconds, res.ExecutionsPerS, res.P50Millis, res.P99Millis, res.LagP50Millis, res.LagP99Millis, res.Events, float64(res.PeakRSSBytes)/(1<<20))
	return nil
}

// requestToRunning reads the log from start and returns the p50 and p99 of
// the time between each execution's requested and running events, in ms,
// as the log's commit times tell it, and how many events it read.
func requestToRunning(ctx context.Context, store eventstore.Store, from uint64) (p50, p99 float64, events uint64, err error) {
	requested := map[string]time.Time{}
	var lat []float64
	for {
		batch, err := store.ReadAll(ctx, from, 8192)
		if err != nil {
			return 0, 0, events, err
		}
		if len(batch) == 0 {
			break
		}
		for i := range batch {
			e := &batch[i]
			events++
			switch e.Type {
			case domain.TypeExecutionRequested:
				requested[e.Stream] = e.Time
			case domain.TypeExecutionRunning:
				if t, ok := requested[e.Stream]; ok {
					lat = append(lat, float64(e.Time.Sub(t).Microseconds())/1000)
					delete(requested, e.Stream)
				}
			}
		}
		from = batch[len(batch)-1].Position + 1
	}
	if len(lat) == 0 {
		return 0, 0, events, nil
	}
	sort.Float64s(lat)
	q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	return q(0.50), q(0.99), events, nil
}

// peakRSS returns the process's peak resident set size (VmHWM), 0 if unknown.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

func round(v float64, digits int) float64 {
	p := 1.0
	for i := 0; i < digits; i++ {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}

// cmdBenchWaiting fills one paused action's queue with N waiting executions,
// then measures what a restart costs: the time until the executor and the
// read model have folded the whole log again (what `serve` waits for before
// it listens), and the process's peak RSS with every waiter in memory twice
// (the executor's state and the read model).
func cmdBenchWaiting(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench waiting", stderr)
	storeURL := fs.String("store", "", "store URL (default: a fresh embedded store in a temporary directory)")
	n := fs.Int("executions", 1_000_000, "waiting executions")
	submitters := fs.Int("submitters", 64, "goroutines requesting executions")
	asJSON := fs.Bool("json", false, "print the result as one JSON line last")
	if err := parse(fs, args); err != nil {
		return err
	}
	where, cleanup, err := benchStoreURL(*storeURL)
	if err != nil {
		return err
	}
	defer cleanup()
	store, _, err := openStore(where, "")
	if err != nil {
		return err
	}
	cmds := &command.Service{Store: store, Writer: "bench"}
	ref := "bench.waiting"
	if _, err := cmds.DefineAction(ctx, domain.Policy{Ref: ref, Runner: "core.noop", MaxQueueLength: domain.MaxQueueLengthLimit}); err != nil {
		return err
	}
	if _, err := cmds.Pause(ctx, ref, "bench: nothing is granted"); err != nil {
		return err
	}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, *submitters)
	for range *submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(*n) {
				if _, _, err := cmds.Request(ctx, command.Request{Action: ref}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fill := time.Since(start)
	if err := store.Close(); err != nil {
		return err
	}

	// The first start folds the whole log, as serve does with no snapshot,
	// and saves both folds' snapshots when it stops, as serve does.
	cold, err := benchRestart(ctx, where, ref, *n, nil)
	if err != nil {
		return err
	}
	coldRSS := peakRSS()
	// The restart from those snapshots runs in a fresh process, so that its
	// peak RSS is its own and not this one's.
	warm := map[string]float64{}
	if self, err := os.Executable(); err != nil {
		return err
	} else {
		out, err := exec.CommandContext(ctx, self, "bench", "restart", "--store", where, "--action", ref, "--executions", strconv.Itoa(*n)).Output()
		if err != nil {
			return fmt.Errorf("restart from the snapshots: %w", err)
		}
		if err := json.Unmarshal(out, &warm); err != nil {
			return fmt.Errorf("restart from the snapshots: %w (%q)", err, out)
		}
	}
	res := map[string]any{"waiting": *n, "fill_seconds": round(fill.Seconds(), 3), "events": cold.events,
		"restart_to_ready_seconds": round(cold.took.Seconds(), 3), "peak_rss_bytes": coldRSS,
		"snapshot_restart_to_ready_seconds": warm["restart_to_ready_seconds"], "snapshot_restart_peak_rss_bytes": warm["peak_rss_bytes"]}
	if *asJSON {
		b, _ := json.Marshal(res)
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	fmt.Fprintf(stdout, "waiting executions:      %d (requested in %.1f s)\n"+
		"start, no snapshot:      %.3f s to ready (%d events folded by the executor and the read model), peak RSS %.1f MiB (the fill included)\n"+
		"restart from snapshots:  %.3f s to ready, peak RSS %.1f MiB (a fresh process)\n",
		*n, fill.Seconds(), cold.took.Seconds(), cold.events, float64(coldRSS)/(1<<20),
		warm["restart_to_ready_seconds"], warm["peak_rss_bytes"]/(1<<20))
	return nil
}

type restartResult struct {
	took   time.Duration
	events uint64
}

// benchRestart opens the log at where and folds it the way serve does before
// it listens: the executor's state and the read model at the same time, each
// from its snapshot when there is one. It checks the queue of ref holds n
// waiters, calls whenReady (if not nil), then stops both, saving their
// snapshots.
func benchRestart(ctx context.Context, where, ref string, n int, whenReady func()) (restartResult, error) {
	start := time.Now()
	kind, dir, err := storeLocation(where, "")
	if err != nil {
		return restartResult{}, err
	}
	snaps := projections.SnapshotFiles{Dir: node.CheckpointDir(kind, dir)}
	var loadViews func(context.Context, eventstore.Store, *slog.Logger) *projections.Views
	if snaps.Dir != "" {
		loadViews = projections.ReadViews(snaps) // decodes while the log opens, as in serve
	}
	store, _, err := openStore(where, "")
	if err != nil {
		return restartResult{}, err
	}
	defer store.Close()
	log := newLogger(io.Discard)
	views := projections.NewViews()
	if loadViews != nil {
		views = loadViews(ctx, store, log)
	}
	// As in serve: the read model and the executor fold at the same time.
	readModel := node.NewReadModel(views, store, nil, 0, log)
	if err := readModel.Start(ctx); err != nil {
		return restartResult{}, err
	}
	defer readModel.Stop()
	nd, err := node.Start(ctx, store, node.Config{SnapshotDir: snaps.Dir, Logger: log})
	if err != nil {
		return restartResult{}, err
	}
	defer nd.Stop()
	if err := startstop.WaitAllStarted(ctx, readModel); err != nil {
		if rerr := readModel.Err(); rerr != nil {
			return restartResult{}, rerr
		}
		return restartResult{}, err
	}
	res := restartResult{took: time.Since(start), events: views.Next()}
	if whenReady != nil {
		whenReady() // while both folds are alive
	}
	if st, _ := views.Stats(ref); st.QueueLength != n {
		return res, fmt.Errorf("after the restart the queue holds %d waiters, want %d", st.QueueLength, n)
	}
	if snaps.Dir != "" {
		if err := views.SaveSnapshot(snaps); err != nil {
			return res, err
		}
	}
	return res, nil
}

// cmdBenchRestart is `bench waiting`'s second process: one restart, its
// figures as JSON on stdout.
func cmdBenchRestart(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench restart", stderr)
	storeURL := fs.String("store", "", "store URL")
	ref := fs.String("action", "", "the action whose waiters to count")
	n := fs.Int("executions", 0, "waiters expected")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the restart to this file (go tool pprof)")
	memProfile := fs.String("memprofile", "", "write a heap profile taken after the restart to this file (go tool pprof)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var whenReady func()
	if *memProfile != "" {
		whenReady = func() {
			if err := writeHeapProfile(*memProfile); err != nil {
				fmt.Fprintln(stderr, "memprofile:", err)
			}
		}
	}
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	r, err := benchRestart(ctx, *storeURL, *ref, *n, whenReady)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(map[string]any{"restart_to_ready_seconds": round(r.took.Seconds(), 3), "peak_rss_bytes": peakRSS(), "events": r.events})
	fmt.Fprintln(stdout, string(b))
	return nil
}

// benchStoreURL returns the store a benchmark runs on: the given URL, or a
// fresh embedded store in a temporary directory that cleanup removes. A
// postgres:// URL that names no schema (no ?schema=, no TURNSTILE_PG_SCHEMA)
// gets a fresh one, migrated, that cleanup drops.
func benchStoreURL(storeURL string) (where string, cleanup func(), err error) {
	if kind, _, _ := storeLocation(storeURL, ""); kind == "postgres" {
		return benchSchema(storeURL)
	}
	if storeURL != "" {
		return storeURL, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "turnstile-bench-")
	if err != nil {
		return "", nil, err
	}
	return "embedded://" + dir, func() { _ = os.RemoveAll(dir) }, nil
}

// benchSchema returns storeURL with a fresh, migrated schema when it names
// none, and a cleanup that drops it.
func benchSchema(storeURL string) (string, func(), error) {
	u, err := url.Parse(storeURL)
	if err != nil {
		return "", nil, usageError{err}
	}
	q := u.Query()
	if q.Get("schema") != "" || node.PGSchema() != "" {
		return storeURL, func() {}, nil
	}
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	schema := "bench_" + hex.EncodeToString(b)
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := postgres.MigrateURL(ctx, u.String(), schema); err != nil {
		return "", nil, fmt.Errorf("bench: create schema %s: %w", schema, err)
	}
	q.Del("schema")
	u.RawQuery = q.Encode()
	server := u.String()
	return storeURLWithSchema(server, schema), func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, server)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: drop schema %s: %v\n", schema, err)
			return
		}
		defer func() { _ = conn.Close(ctx) }()
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			fmt.Fprintf(os.Stderr, "bench: drop schema %s: %v\n", schema, err)
		}
	}, nil
}

func storeURLWithSchema(server, schema string) string {
	u, _ := url.Parse(server)
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// writeHeapProfile writes a heap profile (live and allocated since start)
// to path, after a garbage collection.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// startTrace starts writing an execution trace to path ("" traces nothing)
// and returns the function that stops and closes it (once: later calls do
// nothing).
func startTrace(path string) (stop func(), err error) {
	return startRecording(path, trace.Start, trace.Stop)
}

// startCPUProfile is startTrace for a CPU profile.
func startCPUProfile(path string) (stop func(), err error) {
	return startRecording(path, pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// startRecording creates path and runs start on it; the function it returns
// runs end and closes the file, once. With path "" it does nothing.
func startRecording(path string, start func(io.Writer) error, end func()) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			end()
			_ = f.Close()
		})
	}, nil
}
