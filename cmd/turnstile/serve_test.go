package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/projections"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// turnstileBinary builds the real binary once per test run (without the
// race detector: it is the system under test, run as a child process).
func turnstileBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "turnstile-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "turnstile")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// serveProc is a `turnstile serve` child process.
type serveProc struct {
	cmd  *exec.Cmd
	url  string
	logs *serveLog
	done chan struct{}
}

// startServe starts `turnstile serve` on dir and waits until it listens.
func startServe(t *testing.T, bin, dir string, extra ...string) *serveProc {
	t.Helper()
	args := append([]string{"serve", "--data", dir, "--addr", "127.0.0.1:0", "--workers", "2", "--slots", "8"}, extra...)
	cmd := exec.Command(bin, args...)
	logs := &serveLog{}
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, logs: logs, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			_, _ = logs.Write([]byte(line + "\n"))
			if m := servedAt.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		_ = pw.Close()
		close(p.done)
	}()
	select {
	case a := <-addr:
		p.url = "http://" + a
	case <-p.done:
		t.Fatalf("turnstile serve exited before listening:\n%s", logs.String())
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("turnstile serve did not start listening:\n%s", logs.String())
	}
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *serveProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop ends the process with SIGTERM and waits for it.
func (p *serveProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.kill()
		t.Fatalf("turnstile serve did not stop on SIGTERM:\n%s", p.logs.String())
	}
}

// call sends a JSON request and decodes a JSON answer into out (if not nil).
func call(ctx context.Context, method, url string, body any, header map[string]string, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %s: %w", data, err)
		}
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, data)
	}
	return resp.StatusCode, nil
}

// TestServeSurvivesKill9 runs `turnstile serve` as a child process, submits
// executions across ten actions while killing it with SIGKILL at random
// instants and restarting it, and then checks the whole log: every
// execution ended exactly once, no attempt ran twice, FIFO and the limits
// held at every position, the rebuilt read model equals the live one, and
// queue_stats totals match the log.
func TestServeSurvivesKill9(t *testing.T) {
	executions, kills := 2000, 20
	if testing.Short() {
		executions, kills = 300, 5
	}
	bin := turnstileBinary(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Snapshots every few hundred events: most kills land between two, and
	// some in the middle of writing one.
	snapshots := []string{"--snapshot-every", "300"}
	var cur atomic.Pointer[serveProc]
	cur.Store(startServe(t, bin, dir, snapshots...))
	base := func() string { return cur.Load().url }

	limits := map[string]int{}
	for i := range 10 {
		ref := fmt.Sprintf("crash.a%d", i)
		limits[ref] = 1 + i%4
		p := domain.Policy{Ref: ref, Runner: "core.sleep", MaxConcurrent: limits[ref], MaxAttempts: 5}
		if _, err := call(ctx, "POST", base()+"/api/v1/actions", p, nil, nil); err != nil {
			t.Fatal(err)
		}
	}

	// Submitters: each execution has an idempotency key, so a request that
	// failed because the server died is simply sent again.
	var (
		mu  sync.Mutex
		ids = map[string]string{} // id → action
	)
	keys := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				ref := fmt.Sprintf("crash.a%d", k%10)
				body := map[string]any{"action": ref, "input": map[string]any{"seconds": 0.002 + float64(k%7)*0.004}}
				for {
					var acc struct{ ID string }
					_, err := call(ctx, "POST", base()+"/api/v1/executions", body, map[string]string{"Idempotency-Key": fmt.Sprintf("crash-%d", k)}, &acc)
					if err == nil {
						mu.Lock()
						ids[acc.ID] = ref
						mu.Unlock()
						break
					}
					if ctx.Err() != nil {
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
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

	// The killer: SIGKILL at random instants, restart at once.
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for i := range kills {
		time.Sleep(time.Duration(50+rng.IntN(700)) * time.Millisecond)
		cur.Load().kill()
		cur.Store(startServe(t, bin, dir, snapshots...))
		logs := cur.Load().logs.String()
		t.Logf("kill %d/%d done, restarted at %s; read model from a snapshot: %v, executor: %v", i+1, kills, base(),
			strings.Contains(logs, "read model resumed from a snapshot"), strings.Contains(logs, `msg="resumed from a snapshot"`))
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("submitting timed out")
	}
	if len(ids) != executions {
		t.Fatalf("%d executions accepted, want %d", len(ids), executions)
	}

	// Wait until every execution has ended.
	var stats struct {
		QueueStats []projections.QueueStats `json:"queue_stats"`
	}
	for {
		if _, err := call(ctx, "GET", base()+"/api/v1/queue-stats", nil, nil, &stats); err != nil {
			t.Fatal(err)
		}
		busy := 0
		for _, s := range stats.QueueStats {
			busy += s.QueueLength + s.ActiveCount
		}
		if busy == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("executions still waiting or active: %+v", stats.QueueStats)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var rebuild struct {
		Equal       bool     `json:"equal"`
		Differences []string `json:"differences"`
		Position    uint64   `json:"position"`
	}
	if _, err := call(ctx, "POST", base()+"/api/v1/admin/rebuild", nil, nil, &rebuild); err != nil {
		t.Fatal(err)
	}
	if !rebuild.Equal {
		t.Errorf("the rebuilt read model differs from the live one at %d: %v", rebuild.Position, rebuild.Differences)
	}
	if _, err := call(ctx, "GET", base()+"/api/v1/queue-stats", nil, nil, &stats); err != nil {
		t.Fatal(err)
	}
	cur.Load().stop(t)

	store, err := embedded.Open(filepath.Join(dir, "log"), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rep, err := projections.Audit(ctx, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range rep.Violations {
		if i == 20 {
			break
		}
		t.Errorf("audit: position %d %s %s [%s] %s", v.Position, v.Stream, v.Type, v.Rule, v.Detail)
	}
	if len(rep.Open) != 0 {
		t.Errorf("%d executions never ended, e.g. %v", len(rep.Open), rep.Open[:min(5, len(rep.Open))])
	}
	if rep.Executions != executions {
		t.Errorf("the log holds %d executions, want %d", rep.Executions, executions)
	}
	retried := checkAttempts(ctx, t, store, ids)
	checkStatsMatchLog(ctx, t, store, stats.QueueStats)
	t.Logf("%d executions, %d kills: %d events, %d executions handed over again after a kill, by status %v",
		executions, kills, rep.Events, retried, rep.ByStatus)
}

// checkAttempts: an execution runs at most once per handoff, and only a
// recorded retry (a new execution.scheduled after handoff_expired or
// abandoned) lets it run again. It returns how many executions were handed
// over more than once.
func checkAttempts(ctx context.Context, t *testing.T, store eventstore.Store, ids map[string]string) (retried int) {
	t.Helper()
	for id := range ids {
		evs, err := store.ReadStream(ctx, domain.ExecutionStream(id), 0, 10_000)
		if err != nil {
			t.Fatal(err)
		}
		scheduled, ran := 0, map[int]bool{}
		for i := range evs {
			ev, err := domain.Catalogue.Decode(&evs[i])
			if err != nil {
				t.Fatal(err)
			}
			switch e := ev.(type) {
			case domain.ExecutionScheduled:
				scheduled++
			case domain.ExecutionRunning:
				if ran[e.Attempt] {
					t.Errorf("execution %s ran attempt %d twice", id, e.Attempt)
				}
				ran[e.Attempt] = true
			}
		}
		if len(ran) > scheduled {
			t.Errorf("execution %s ran %d times with %d handoffs", id, len(ran), scheduled)
		}
		if scheduled > 1 {
			retried++
		}
	}
	return retried
}

// checkStatsMatchLog compares queue_stats totals with counts taken straight
// from the log.
func checkStatsMatchLog(ctx context.Context, t *testing.T, store eventstore.Store, stats []projections.QueueStats) {
	t.Helper()
	action := map[string]string{}
	counts := map[string]map[string]uint64{}
	count := func(ref, what string) {
		if counts[ref] == nil {
			counts[ref] = map[string]uint64{}
		}
		counts[ref][what]++
	}
	for from := uint64(0); ; {
		batch, err := store.ReadAll(ctx, from, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if len(batch) == 0 {
			break
		}
		for i := range batch {
			env := &batch[i]
			from = env.Position + 1
			cat, id := domain.SplitStream(env.Stream)
			if cat != domain.StreamExecution {
				continue
			}
			if env.Type == domain.TypeExecutionRequested {
				ev, err := domain.Catalogue.Decode(env)
				if err != nil {
					t.Fatal(err)
				}
				action[id] = ev.(domain.ExecutionRequested).Action
				continue
			}
			count(action[id], env.Type)
		}
	}
	for _, s := range stats {
		c := counts[s.Action]
		got := []uint64{s.TotalGranted, s.TotalCompleted, s.TotalFailed, s.TotalTimedOut, s.TotalCancelled, s.TotalRejected}
		want := []uint64{c[domain.TypeExecutionScheduling], c[domain.TypeExecutionCompleted], c[domain.TypeExecutionFailed],
			c[domain.TypeExecutionTimedOut], c[domain.TypeExecutionCancelled], c[domain.TypeExecutionRejected]}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("queue_stats of %s (granted, completed, failed, timed out, cancelled, rejected) = %v, the log says %v", s.Action, got, want)
		}
		if ended := s.TotalCompleted + s.TotalFailed + s.TotalTimedOut + s.TotalCancelled + s.TotalRejected; ended != s.TotalEnqueued+s.TotalRejected {
			t.Errorf("queue_stats of %s: %d ended, %d enqueued and %d rejected", s.Action, ended, s.TotalEnqueued, s.TotalRejected)
		}
	}
}

// TestServeOnKurrentDB: serve no longer refuses a kurrentdb:// store (the
// executor takes its single-stream path there): it says so, then opens the
// store, which here fails because no server listens (none runs on these
// machines), with the store's message and not a usage error.
func TestServeOnKurrentDB(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // a port nothing listens on
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"serve", "--store", "kurrentdb://" + addr + "?tls=false", "--addr", "127.0.0.1:0", "--workers", "0"}, &stdout, &stderr)
	out := stderr.String()
	if code != 3 || !strings.Contains(out, "single-stream path") || !strings.Contains(out, "cannot reach the server") {
		t.Fatalf("serve on an unreachable KurrentDB: exit %d, stderr:\n%s", code, out)
	}
}
