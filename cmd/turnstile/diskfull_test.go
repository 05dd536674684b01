package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	"github.com/turnstile/turnstile/projections"
)

// TestDiskFullEmbedded runs serve on the embedded store in a small tmpfs
// (mounted by the test, so it needs root; skipped otherwise), fills the
// filesystem under load and frees it. When an append cannot be written,
// serve answers 503 problems (never an empty answer) and exits with a
// clear message and a non-zero code instead of answering 500s for ever;
// started again once there is room, it has every acknowledged request in
// its log, runs them all, and the audit is clean.
func TestDiskFullEmbedded(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a filesystem")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs to fill")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s): this test needs a filesystem it can fill", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	data := filepath.Join(mnt, "data")
	bin := turnstileBinary(t)
	srv := startServe(t, bin, data)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pol := domain.Policy{Ref: "full.noop", Runner: "core.noop", MaxConcurrent: 8, MaxAttempts: 10}
	if _, err := call(ctx, "POST", srv.url+"/api/v1/actions", pol, nil, nil); err != nil {
		t.Fatal(err)
	}
	// Take what room is left but for the log's preallocated zeros.
	filler := filepath.Join(mnt, "filler")
	if out, err := exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=64k").CombinedOutput(); err == nil {
		t.Fatalf("dd filled no filesystem: %s", out)
	}

	var (
		mu       sync.Mutex
		acked    = map[string]bool{}
		bad      []string
		statuses = map[int]int{}
		next     atomic.Int64
	)
	client := &http.Client{Timeout: 20 * time.Second}
	var wg sync.WaitGroup
	input := `{"action":"full.noop","input":{"pad":"` + strings.Repeat("x", 2000) + `"}}`
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-srv.done:
					return
				default:
				}
				key := fmt.Sprintf("full-%d", next.Add(1))
				req, _ := http.NewRequestWithContext(ctx, "POST", srv.url+"/api/v1/executions", strings.NewReader(input))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", key)
				resp, err := client.Do(req)
				if err != nil {
					select {
					case <-srv.done: // it exited: refused connections are expected now
						return
					case <-time.After(time.Second):
					}
					select {
					case <-srv.done:
					default:
						mu.Lock()
						bad = append(bad, fmt.Sprintf("POST %s: %v while serve runs", key, err))
						mu.Unlock()
					}
					return
				}
				body, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				statuses[resp.StatusCode]++
				switch {
				case rerr != nil || len(body) == 0:
					bad = append(bad, fmt.Sprintf("POST %s: %d with an empty body", key, resp.StatusCode))
				case resp.StatusCode < 300:
					var acc struct{ ID string }
					if json.Unmarshal(body, &acc) != nil || acc.ID == "" {
						bad = append(bad, fmt.Sprintf("POST %s: %d %s", key, resp.StatusCode, body))
					}
					acked[acc.ID] = true
				case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
				default:
					bad = append(bad, fmt.Sprintf("POST %s: %d %s", key, resp.StatusCode, body))
				}
				mu.Unlock()
			}
		}()
	}
	select {
	case <-srv.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("serve did not stop on a full disk (%v):\n%s", statuses, tail(srv.logs.String(), 30))
	}
	wg.Wait()
	t.Logf("answers by status: %v; %d acknowledged", statuses, len(acked))
	for _, b := range bad[:min(len(bad), 20)] {
		t.Error(b)
	}
	ws, _ := srv.state.Sys().(syscall.WaitStatus)
	if srv.state.Success() || ws.Signaled() {
		t.Errorf("serve ended with %v on a full disk, want a non-zero exit code", srv.state)
	}
	if !strings.Contains(srv.logs.String(), "the log could not be written") {
		t.Errorf("serve's log does not say why it stopped:\n%s", tail(srv.logs.String(), 20))
	}
	if len(acked) == 0 {
		t.Fatal("nothing was acknowledged before the disk filled")
	}

	// Room again: a restart recovers, with every acknowledged request.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	srv2 := startServe(t, bin, data)
	for id := range acked {
		for {
			var v projections.ExecutionView
			_, err := call(ctx, "GET", srv2.url+"/api/v1/executions/"+id, nil, nil, &v)
			if err == nil && v.Status == domain.StatusCompleted {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("acknowledged execution %s after the restart: %v (status %q)", id, err, v.Status)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var acc struct{ ID string }
	if _, err := call(ctx, "POST", srv2.url+"/api/v1/executions", json.RawMessage(input), nil, &acc); err != nil {
		t.Fatalf("a request after the restart: %v", err)
	}
	srv2.stop(t)
	if out, err := exec.Command(bin, "audit", "--data", data).CombinedOutput(); err != nil {
		t.Errorf("audit: %v\n%s", err, tail(string(out), 30))
	}
}
