package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/embedded"
)

// TestServePortTaken: with its port taken, serve fails before it has done
// anything: no worker registered, nothing granted, nothing in the log.
func TestServePortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	// A log with work waiting: a previous run's queued execution.
	srv := startServe(t, turnstileBinary(t), dir, "--workers", "0")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := call(ctx, "POST", srv.url+"/api/v1/actions", domain.Policy{Ref: "port.noop", Runner: "core.noop", MaxConcurrent: 1}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := call(ctx, "POST", srv.url+"/api/v1/executions", map[string]any{"action": "port.noop", "input": map[string]any{}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	srv.stop(t)
	before := logHead(t, dir)

	out, err := exec.Command(turnstileBinary(t), "serve", "--data", dir, "--addr", ln.Addr().String(), "--workers", "2").CombinedOutput()
	if err == nil {
		t.Fatalf("serve started on a taken port:\n%s", out)
	}
	if !strings.Contains(string(out), "address already in use") {
		t.Errorf("serve's error does not say the port is taken:\n%s", out)
	}
	if after := logHead(t, dir); after != before {
		t.Errorf("serve wrote %d events before failing on a taken port:\n%s", after-before, out)
	}
}

func logHead(t *testing.T, dir string) uint64 {
	t.Helper()
	s, err := embedded.Open(filepath.Join(dir, "log"), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h, err := s.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestServeStopHandsBack: on SIGTERM a run that does not finish within
// --grace is handed back, not failed: the log says which, serve exits 0,
// and after the restart the execution runs again as its attempt 2 and
// completes. A second SIGTERM stops serve at once (exit code 130), and the
// run it cut is taken back after the restart the same way.
func TestServeStopHandsBack(t *testing.T) {
	for _, twice := range []bool{false, true} {
		t.Run(fmt.Sprintf("second-signal=%v", twice), func(t *testing.T) {
			bin := turnstileBinary(t)
			dir := t.TempDir()
			srv := startServe(t, bin, dir, "--grace", "500ms")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			pol := domain.Policy{Ref: "stop.sleep", Runner: "core.sleep", MaxConcurrent: 1, MaxAttempts: 3}
			if _, err := call(ctx, "POST", srv.url+"/api/v1/actions", pol, nil, nil); err != nil {
				t.Fatal(err)
			}
			var acc struct{ ID string }
			if _, err := call(ctx, "POST", srv.url+"/api/v1/executions", map[string]any{"action": "stop.sleep", "input": map[string]any{"seconds": 2}}, nil, &acc); err != nil {
				t.Fatal(err)
			}
			waitExecution(ctx, t, srv.url, acc.ID, func(x wire.Execution) bool { return x.Status == string(domain.StatusRunning) })
			t0 := time.Now()
			_ = srv.cmd.Process.Signal(syscall.SIGTERM)
			if twice {
				time.Sleep(50 * time.Millisecond)
				_ = srv.cmd.Process.Signal(syscall.SIGTERM)
			}
			select {
			case <-srv.done:
			case <-time.After(30 * time.Second):
				t.Fatalf("serve did not stop:\n%s", tail(srv.logs.String(), 30))
			}
			took := time.Since(t0)
			if twice {
				if code := srv.state.ExitCode(); code != 130 {
					t.Errorf("exit code %d after a second signal, want 130:\n%s", code, tail(srv.logs.String(), 20))
				}
				if strings.Contains(srv.logs.String(), "handing them back") {
					t.Errorf("serve waited for the grace period despite a second signal (%v)", took)
				}
			} else {
				if !srv.state.Success() {
					t.Errorf("serve ended with %v", srv.state)
				}
				if !strings.Contains(srv.logs.String(), "run handed back") || !strings.Contains(srv.logs.String(), acc.ID) {
					t.Errorf("serve's log does not name the run it handed back:\n%s", tail(srv.logs.String(), 20))
				}
			}
			srv2 := startServe(t, bin, dir)
			x := waitExecution(ctx, t, srv2.url, acc.ID, func(x wire.Execution) bool { return domain.Status(x.Status).Terminal() })
			if x.Status != string(domain.StatusCompleted) || x.Attempt != 2 {
				t.Errorf("after the restart: %s, attempt %d (%s); want completed, attempt 2", x.Status, x.Attempt, x.Error)
			}
			srv2.stop(t)
			if out, err := exec.Command(bin, "audit", "--data", dir).CombinedOutput(); err != nil {
				t.Errorf("audit: %v\n%s", err, tail(string(out), 30))
			}
		})
	}
}

func waitExecution(ctx context.Context, t *testing.T, base, id string, ok func(wire.Execution) bool) wire.Execution {
	t.Helper()
	for {
		var x wire.Execution
		_, err := call(ctx, "GET", base+"/api/v1/executions/"+id, nil, nil, &x)
		if err == nil && ok(x) {
			return x
		}
		if ctx.Err() != nil {
			t.Fatalf("execution %s: %v (status %s)", id, err, x.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
