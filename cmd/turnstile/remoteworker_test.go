package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	rwAdmin  = "admin-secret-for-remote-workers"
	rwWorker = "worker-secret-for-remote-workers"
)

// startRemoteServe starts `turnstile serve` with no in-process worker and
// tokens for admin and worker; it returns the process and the data dir.
func startRemoteServe(t *testing.T, bin string) (*serveProc, string) {
	t.Helper()
	dir := t.TempDir()
	return startServe(t, bin, dir, "--workers", "0", "--token", "admin:"+rwAdmin, "--token", "worker:"+rwWorker), dir
}

// startProc starts a worker process; its stderr goes to the test's log on failure.
func startWorkerProc(t *testing.T, name string, args []string, env []string) (*exec.Cmd, *procLog, chan error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	logs := &procLog{}
	cmd.Stderr, cmd.Stdout = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	})
	return cmd, logs, done
}

// runOne defines action ref with runner, requests one execution with input
// and waits for its end.
func runOne(t *testing.T, url, ref, runner string, input any) execView {
	t.Helper()
	ctx := context.Background()
	admin := map[string]string{"Authorization": "Bearer " + rwAdmin}
	if _, err := call(ctx, "POST", url+"/api/v1/actions", map[string]any{"ref": ref, "runner": runner, "max_concurrent": 2}, admin, nil); err != nil {
		t.Fatal(err)
	}
	var acc struct{ ID string }
	if _, err := call(ctx, "POST", url+"/api/v1/executions", map[string]any{"action": ref, "input": input}, admin, &acc); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var x execView
		if _, err := call(ctx, "GET", url+"/api/v1/executions/"+acc.ID, nil, admin, &x); err != nil {
			t.Fatal(err)
		}
		switch x.Status {
		case "completed", "failed", "timed_out", "cancelled", "rejected":
			return x
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution %s of %s still %s", acc.ID, ref, x.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// procLog collects a worker process's output (safe for concurrent writes).
type procLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *procLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *procLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

type execView struct {
	Status string          `json:"status"`
	Worker string          `json:"worker"`
	Result json.RawMessage `json:"result"`
	Error  string          `json:"error"`
}

// TestRemoteWorkers runs `turnstile worker --server` (the built-in runners
// through the Go worker package, no database credentials) and the Python
// example worker (standard library only) against a real `turnstile serve`
// with no in-process worker: each completes an execution of the runner it
// serves; on SIGTERM both drain and exit 0; the log's audit is clean.
func TestRemoteWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	bin := turnstileBinary(t)
	srv, dir := startRemoteServe(t, bin)

	goCmd, goLogs, goDone := startWorkerProc(t, bin, []string{"worker", "--server", srv.url, "--id", "go-remote", "--slots", "4"},
		[]string{"TURNSTILE_TOKEN=" + rwWorker, "TURNSTILE_STORE="})
	x := runOne(t, srv.url, "demo.echo", "core.echo", map[string]any{"hello": "world"})
	if x.Status != "completed" || x.Worker != "go-remote" || string(x.Result) != `{"hello":"world"}` {
		t.Fatalf("through turnstile worker --server: %+v\n%s", x, goLogs.String())
	}
	if x := runOne(t, srv.url, "demo.fail", "core.fail", map[string]any{"message": "boom"}); x.Status != "failed" || !strings.Contains(x.Error, "boom") {
		t.Errorf("core.fail through the remote worker: %+v", x)
	}

	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is needed for the any-language worker test")
	}
	script, _ := filepath.Abs("../../examples/python/worker.py")
	pyCmd, pyLogs, pyDone := startWorkerProc(t, py, []string{script},
		[]string{"TURNSTILE_SERVER=" + srv.url, "TURNSTILE_TOKEN=" + rwWorker, "TURNSTILE_WORKER_NAME=py-1"})
	x = runOne(t, srv.url, "demo.words", "py.wordcount", map[string]any{"text": "one two three"})
	if x.Status != "completed" || x.Worker != "py-1" || string(x.Result) != `{"words":3,"upper":"ONE TWO THREE"}` {
		t.Fatalf("through the Python worker: %+v\n%s", x, pyLogs.String())
	}
	if x := runOne(t, srv.url, "demo.words.bad", "py.wordcount", map[string]any{"text": 3}); x.Status != "failed" || !strings.Contains(x.Error, "must be a string") {
		t.Errorf("a failing Python run: %+v", x)
	}

	for name, p := range map[string]struct {
		cmd  *exec.Cmd
		done chan error
		logs *procLog
	}{"go": {goCmd, goDone, goLogs}, "python": {pyCmd, pyDone, pyLogs}} {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.done:
			if err != nil {
				t.Errorf("%s worker after SIGTERM: %v\n%s", name, err, p.logs.String())
			}
		case <-time.After(20 * time.Second):
			t.Errorf("%s worker did not stop on SIGTERM\n%s", name, p.logs.String())
		}
	}
	srv.stop(t)
	if out, err := exec.Command(bin, "audit", "--data", dir).CombinedOutput(); err != nil {
		t.Fatalf("audit: %v\n%s", err, out)
	}
}
