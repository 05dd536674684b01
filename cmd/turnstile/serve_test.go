package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
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
	cmd   *exec.Cmd
	url   string // "" if it died before listening
	logs  *serveLog
	done  chan struct{}
	state *os.ProcessState // set once done is closed
}

// serveOpts says how to start `turnstile serve`.
type serveOpts struct {
	args   []string // after "serve"
	env    []string // added to the test's environment
	mayDie bool     // dying before it listens is not a failure (a crash point may fire at start)
}

// startServe starts `turnstile serve` on dir and waits until it listens.
func startServe(t *testing.T, bin, dir string, extra ...string) *serveProc {
	t.Helper()
	return startServeWith(t, bin, serveOpts{args: append([]string{"--data", dir}, extra...)})
}

// startServeWith starts `turnstile serve` with two workers of eight slots on
// any free port and waits until it listens (or, with mayDie, dies).
func startServeWith(t *testing.T, bin string, o serveOpts) *serveProc {
	t.Helper()
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--workers", "2", "--slots", "8"}, o.args...)
	cmd := exec.Command(bin, args...)
	if len(o.env) > 0 {
		cmd.Env = append(os.Environ(), o.env...)
	}
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
		sc.Buffer(make([]byte, 64<<10), 1<<20)
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
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		_ = pw.Close()
		close(p.done)
	}()
	select {
	case a := <-addr:
		p.url = "http://" + a
	case <-p.done:
		if !o.mayDie {
			t.Fatalf("turnstile serve exited before listening:\n%s", logs.String())
		}
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

// killedBySIGKILL reports whether the process has ended by SIGKILL.
func (p *serveProc) killedBySIGKILL() bool {
	select {
	case <-p.done:
	default:
		return false
	}
	ws, ok := p.state.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
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

// TestServeOnKurrentDB: serve opens a kurrentdb:// store (it says which
// path the executor takes once the store tells what the server offers),
// which here fails because no server listens (none runs on these
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
	if code != 3 || !strings.Contains(out, "cannot reach the server") {
		t.Fatalf("serve on an unreachable KurrentDB: exit %d, stderr:\n%s", code, out)
	}
}

// auditLog audits the whole log and reports each violation (the first 20)
// and any execution that never ended as a test error.
// eachEvent calls fn with every event of the log from position from to
// its end, in order, and returns the first error of the store or of fn.
func eachEvent(ctx context.Context, store eventstore.Store, from uint64, fn func(env *domain.Envelope) error) error {
	for {
		batch, err := store.ReadAll(ctx, from, 4096)
		if err != nil || len(batch) == 0 {
			return err
		}
		for i := range batch {
			if err := fn(&batch[i]); err != nil {
				return err
			}
		}
		from = batch[len(batch)-1].Position + 1
	}
}

func auditLog(ctx context.Context, t *testing.T, store eventstore.Store) *projections.AuditReport {
	t.Helper()
	rep, err := projections.Audit(ctx, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations[:min(len(rep.Violations), 20)] {
		t.Errorf("audit: position %d %s %s [%s] %s", v.Position, v.Stream, v.Type, v.Rule, v.Detail)
	}
	if len(rep.Open) != 0 {
		t.Errorf("%d executions never ended, e.g. %v", len(rep.Open), rep.Open[:min(5, len(rep.Open))])
	}
	return rep
}

// TestServeWorkerPrefix: --worker-prefix names the in-process workers (so
// that serves sharing a log do not take each other's workers over), and a
// prefix that makes no valid worker id is a usage error.
func TestServeWorkerPrefix(t *testing.T) {
	bin := turnstileBinary(t)
	out, err := exec.Command(bin, "serve", "--data", t.TempDir(), "--worker-prefix", "two words").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "--worker-prefix") {
		t.Fatalf("serve --worker-prefix 'two words': %v, output:\n%s", err, out)
	}
	p := startServe(t, bin, t.TempDir(), "--worker-prefix", "node7")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		var got struct {
			Workers []struct {
				ID string `json:"id"`
			} `json:"workers"`
		}
		if _, err := call(ctx, "GET", p.url+"/api/v1/workers", nil, nil, &got); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, w := range got.Workers {
			ids = append(ids, w.ID)
		}
		sort.Strings(ids)
		if strings.Join(ids, ",") == "node7-1,node7-2" {
			break
		}
		if len(ids) >= 2 || ctx.Err() != nil {
			t.Fatalf("workers %v, want node7-1 and node7-2", ids)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.stop(t)
}

var profilesAt = regexp.MustCompile(`msg="serving profiles" addr=(\S+)`)

// TestServeDebugAddr: --debug-addr serves Go's profiles on a loopback
// address apart from the API, and refuses any other address (the profiles
// have no auth) as a usage error.
func TestServeDebugAddr(t *testing.T) {
	bin := turnstileBinary(t)
	out, err := exec.Command(bin, "serve", "--data", t.TempDir(), "--debug-addr", "0.0.0.0:0").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "loopback") {
		t.Fatalf("serve --debug-addr 0.0.0.0:0: %v, output:\n%s", err, out)
	}
	p := startServe(t, bin, t.TempDir(), "--debug-addr", "127.0.0.1:0")
	m := profilesAt.FindStringSubmatch(p.logs.String())
	if m == nil {
		t.Fatalf("no \"serving profiles\" line in the log:\n%s", p.logs)
	}
	resp, err := http.Get("http://" + m[1] + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "heap profile") {
		t.Fatalf("GET /debug/pprof/heap: %s\n%.200s", resp.Status, body)
	}
	// The API does not serve them.
	if resp, err := http.Get(p.url + "/debug/pprof/"); err != nil || resp.StatusCode == http.StatusOK {
		t.Fatalf("the API answered /debug/pprof/: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}
