package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/postgres"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/projections/sqlviews"
)

// pgTestURL returns the test database (TURNSTILE_POSTGRES_URL), skips the
// test without one, or fails it in CI, where PostgreSQL tests must run.
func pgTestURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("TURNSTILE_POSTGRES_URL")
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TURNSTILE_POSTGRES_URL is not set and CI=true: the PostgreSQL tests must run in CI; run them through scripts/with-postgres.sh")
		}
		t.Skip("TURNSTILE_POSTGRES_URL not set: run `scripts/with-postgres.sh go test ./cmd/turnstile/` (starts a throwaway PostgreSQL), or set it to postgres://user:pass@host:port/db")
	}
	return u
}

// pgTestSchema makes a fresh schema name, migrates it with the binary, and
// drops it when the test ends. It returns the store URL naming it.
func pgTestSchema(t *testing.T, bin, base string) (storeURL, schema string) {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	schema = "mp_" + hex.EncodeToString(b)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	storeURL = u.String()
	if out, err := exec.Command(bin, "migrate", "--store", storeURL).CombinedOutput(); err != nil {
		t.Fatalf("turnstile migrate: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer func() { _ = conn.Close(ctx) }()
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return storeURL, schema
}

// proc is a turnstile child process whose log the test reads.
type proc struct {
	name string
	cmd  *exec.Cmd
	logs *serveLog
	done chan struct{}
	err  error // cmd.Wait's, once done is closed
}

// startProc starts the binary with args; it is killed when the test ends.
func startProc(t *testing.T, bin, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	p := &proc{name: name, cmd: cmd, logs: &serveLog{}, done: make(chan struct{})}
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			_, _ = p.logs.Write([]byte(sc.Text() + "\n"))
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		p.err = cmd.Wait()
		_ = pw.Close()
		<-copied
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("---- log of %s ----\n%s", p.name, tail(p.logs.String(), 60))
		}
	})
	return p
}

// waitLog waits until the process's log matches re and returns the match.
func (p *proc) waitLog(t *testing.T, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := rx.FindStringSubmatch(p.logs.String()); m != nil {
			return m
		}
		select {
		case <-p.done:
			if m := rx.FindStringSubmatch(p.logs.String()); m != nil {
				return m
			}
			t.Fatalf("%s exited (%v) before logging %q:\n%s", p.name, p.err, re, tail(p.logs.String(), 40))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q:\n%s", p.name, re, tail(p.logs.String(), 40))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends the process with SIGKILL and waits for it.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// terminate ends the process with SIGTERM and checks it exits cleanly.
func (p *proc) terminate(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			t.Errorf("%s exited with %v after SIGTERM", p.name, p.err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not stop within 30s of SIGTERM", p.name)
	}
}

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-lines):], "\n")
}

// TestProcessesOnPostgres runs turnstile as separate processes on one
// PostgreSQL log: the API (serve, no executor, no workers), two executors
// (one active, one standing by) and three workers. It submits 2,000
// executions on ten actions (limits 1–8) over HTTP, and SIGKILLs the active
// executor and one worker mid-run. Afterwards, folding the whole log: every
// execution ended exactly once, no attempt ran twice, FIFO and the limits
// held at every position (the audit), the standby took over (every decision
// of the killed executor precedes every decision of the standby), the killed
// worker was declared lost, the rebuilt read model equals the live one, and
// queue_stats totals match the log. Last, a second worker process with a
// running worker's id takes the id over, and the first exits.
func TestProcessesOnPostgres(t *testing.T) {
	base := pgTestURL(t)
	executions := 2000
	if testing.Short() {
		executions = 400
	}
	bin := turnstileBinary(t)
	storeURL, schema := pgTestSchema(t, bin, base)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	api := startProc(t, bin, "api", "serve", "--store", storeURL, "--addr", "127.0.0.1:0", "--executor=false", "--workers", "0")
	apiURL := "http://" + api.waitLog(t, `msg="turnstile serving" addr=(\S+)`)[1]
	execArgs := func(name string) []string {
		return []string{"executor", "--store", storeURL, "--name", name, "--worker-lease", "3s"}
	}
	execA := startProc(t, bin, "executor exec-a", execArgs("exec-a")...)
	execA.waitLog(t, `lease: acquired; this process is active`)
	execB := startProc(t, bin, "executor exec-b", execArgs("exec-b")...)
	execB.waitLog(t, `standing by`)
	workers := map[string]*proc{}
	for _, id := range []string{"w1", "w2", "w3"} {
		workers[id] = startProc(t, bin, "worker "+id, "worker", "--store", storeURL, "--id", id, "--slots", "16", "--heartbeat", "500ms", "--grace", "5s")
		workers[id].waitLog(t, `turnstile worker started`)
	}

	limits := map[string]int{}
	for i := range 10 {
		ref := fmt.Sprintf("mp.a%d", i)
		limits[ref] = 1 + i%8
		p := domain.Policy{Ref: ref, Runner: "core.sleep", MaxConcurrent: limits[ref], MaxAttempts: 5}
		if _, err := call(ctx, "POST", apiURL+"/api/v1/actions", p, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu  sync.Mutex
		ids = map[string]string{}
	)
	keys := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				ref := fmt.Sprintf("mp.a%d", k%10)
				body := map[string]any{"action": ref, "input": map[string]any{"seconds": 0.001 + float64(k%5)*0.002}}
				var acc struct{ ID string }
				if _, err := call(ctx, "POST", apiURL+"/api/v1/executions", body, map[string]string{"Idempotency-Key": fmt.Sprintf("mp-%d", k)}, &acc); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ids[acc.ID] = ref
				mu.Unlock()
			}
		}()
	}
	go func() {
		defer close(keys)
		for k := range executions {
			select {
			case keys <- k:
			case <-ctx.Done():
				return
			}
		}
	}()

	// Mid-run: SIGKILL the active executor and one worker.
	ended := func() int {
		var stats struct {
			QueueStats []projections.QueueStats `json:"queue_stats"`
		}
		if _, err := call(ctx, "GET", apiURL+"/api/v1/queue-stats", nil, nil, &stats); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range stats.QueueStats {
			n += int(s.TotalCompleted + s.TotalFailed + s.TotalTimedOut + s.TotalCancelled + s.TotalRejected)
		}
		return n
	}
	for ended() < executions/4 {
		if ctx.Err() != nil {
			t.Fatal("no progress before the kill")
		}
		time.Sleep(50 * time.Millisecond)
	}
	killedAt := time.Now()
	execA.kill()
	workers["w2"].kill()
	t.Logf("SIGKILLed exec-a and w2 with %d executions ended", ended())
	execB.waitLog(t, `TAKEOVER`)
	t.Logf("exec-b took over %s after the kill", time.Since(killedAt).Round(time.Millisecond))

	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if len(ids) != executions {
		t.Fatalf("%d executions accepted, want %d", len(ids), executions)
	}
	for ended() < executions {
		if ctx.Err() != nil {
			t.Fatalf("only %d of %d executions ended", ended(), executions)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var rebuild struct {
		Equal       bool     `json:"equal"`
		Differences []string `json:"differences"`
		Position    uint64   `json:"position"`
	}
	if _, err := call(ctx, "POST", apiURL+"/api/v1/admin/rebuild", nil, nil, &rebuild); err != nil {
		t.Fatal(err)
	}
	if !rebuild.Equal {
		t.Errorf("the rebuilt read model differs from the live one at %d: %v", rebuild.Position, rebuild.Differences)
	}
	var stats struct {
		QueueStats []projections.QueueStats `json:"queue_stats"`
	}
	if _, err := call(ctx, "GET", apiURL+"/api/v1/queue-stats", nil, nil, &stats); err != nil {
		t.Fatal(err)
	}
	// A second process with w1's id takes the id over; the first stops
	// acting and exits with status 3, saying why.
	twin := startProc(t, bin, "worker w1 (second process)", "worker", "--store", storeURL, "--id", "w1", "--slots", "4", "--heartbeat", "500ms")
	twin.waitLog(t, `turnstile worker started`)
	select {
	case <-workers["w1"].done:
		if code := workers["w1"].cmd.ProcessState.ExitCode(); code != 3 || !strings.Contains(workers["w1"].logs.String(), "another process registered the same worker id") {
			t.Errorf("the first w1 exited with status %d, want 3 and a message saying another process took its id:\n%s", code, tail(workers["w1"].logs.String(), 5))
		}
	case <-time.After(30 * time.Second):
		t.Error("the first w1 did not stop after a second process registered its id")
	}
	api.terminate(t)
	execB.terminate(t)
	twin.terminate(t)
	workers["w3"].terminate(t)

	store, err := postgres.OpenURL(ctx, storeURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rep := auditLog(ctx, t, store)
	if rep.Executions != executions || rep.Ended != executions {
		t.Errorf("the log holds %d executions, %d ended, want %d", rep.Executions, rep.Ended, executions)
	}
	// The PostgreSQL read models (kept by the API process until it stopped,
	// then brought to the head here) equal a fresh rebuild of the log.
	pool, _, err := sqlviews.Connect(ctx, storeURL, "")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	sqlOpts := sqlviews.Options{Schema: schema}
	head, err := store.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proj, err := sqlviews.New(ctx, pool, store, sqlOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := proj.CatchUpTo(ctx, head); err != nil {
		t.Fatal(err)
	}
	if sqlRep, err := sqlviews.Check(ctx, pool, store, sqlOpts, 20); err != nil || !sqlRep.Equal() || sqlRep.Position != head {
		t.Errorf("the PostgreSQL read models differ from a rebuild (%v) at %d of %d:\n%s", err, sqlRep.Position, head, strings.Join(sqlRep.Differences, "\n"))
	}
	retried := checkAttempts(ctx, t, store, ids)
	checkStatsMatchLog(ctx, t, store, stats.QueueStats)

	// The takeover, as the log tells it.
	var lastA, firstB uint64
	var byA, byB, lostW2 int
	err = eachEvent(ctx, store, 0, func(env *domain.Envelope) error {
		switch {
		case env.Owner == domain.OwnerExecutor && env.Writer == "exec-a":
			byA++
			lastA = env.Position
		case env.Owner == domain.OwnerExecutor && env.Writer == "exec-b":
			if byB == 0 {
				firstB = env.Position
			}
			byB++
		case env.Owner == domain.OwnerExecutor && env.Writer != "api": // "api": the API's commands (requests, actions)
			t.Errorf("position %d: an executor event by %q", env.Position, env.Writer)
		}
		if env.Type == domain.TypeWorkerLost && env.Stream == domain.WorkerStream("w2") {
			lostW2++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if byA == 0 || byB == 0 {
		t.Errorf("exec-a wrote %d executor events and exec-b %d: both should have decided (before and after the kill)", byA, byB)
	} else if lastA > firstB {
		t.Errorf("exec-a wrote at position %d after exec-b's first decision at %d: both were active at once", lastA, firstB)
	}
	if lostW2 == 0 {
		t.Error("the killed worker w2 was never declared lost")
	}
	t.Logf("schema %s: %d events, %d executions by status %v; exec-a wrote %d executor events, exec-b %d (from position %d); %d executions handed over again",
		schema, rep.Events, rep.Executions, rep.ByStatus, byA, byB, firstB, retried)
}
