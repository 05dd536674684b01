package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
)

// TestPostgresOutage stops PostgreSQL under load for four seconds and
// starts it again, with one serve process (API, read model, executor,
// workers) on it. Throughout, every answer has a body: a 202/200 with the
// execution, or a 503 problem document with Retry-After (never a 200
// without a body, never an empty answer, never a refused connection);
// /readyz says not ready during the outage and ready after it; the process
// does not exit, and logs the outage with positions. Afterwards every
// acknowledged request is in the log and has run to its end, and the audit
// of the whole log is clean.
func TestPostgresOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster of its own")
	}
	pg := newPGCluster(t)
	bin := turnstileBinary(t)
	if out, err := exec.Command(bin, "migrate", "--store", pg.URL).CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	srv := startServeWith(t, bin, serveOpts{args: []string{"--store", pg.URL}})
	// An API-only serve on the same log rides the outage out too.
	apiOnly := startServeWith(t, bin, serveOpts{args: []string{"--store", pg.URL, "--executor=false", "--workers", "0", "--worker-prefix", "api"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pol := domain.Policy{Ref: "outage.noop", Runner: "core.noop", MaxConcurrent: 8, MaxAttempts: 10}
	if _, err := call(ctx, "POST", srv.url+"/api/v1/actions", pol, nil, nil); err != nil {
		t.Fatal(err)
	}

	var (
		mu        sync.Mutex
		acked     = map[string]bool{} // execution ids the API acknowledged
		bad       []string            // answers that break the promise
		statuses  = map[int]int{}
		readyDown atomic.Bool // /readyz said not ready at least once
		next      atomic.Int64
	)
	record := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(bad) < 20 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	stop := make(chan struct{})
	client := &http.Client{Timeout: 20 * time.Second}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("outage-%d", next.Add(1))
				for { // one key until it is acknowledged: an idempotent retry
					body := strings.NewReader(`{"action":"outage.noop","input":{}}`)
					req, _ := http.NewRequestWithContext(ctx, "POST", srv.url+"/api/v1/executions", body)
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Idempotency-Key", key)
					resp, err := client.Do(req)
					if err != nil {
						record("POST %s: %v", key, err)
						return
					}
					data, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					mu.Lock()
					statuses[resp.StatusCode]++
					mu.Unlock()
					if err != nil || len(data) == 0 {
						record("POST %s: %d with an empty body (%v)", key, resp.StatusCode, err)
						return
					}
					if resp.StatusCode < 300 {
						var acc struct{ ID string }
						if err := json.Unmarshal(data, &acc); err != nil || acc.ID == "" {
							record("POST %s: %d with body %q", key, resp.StatusCode, data)
							return
						}
						mu.Lock()
						acked[acc.ID] = true
						mu.Unlock()
						break
					}
					if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
						!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
						record("POST %s: %d Retry-After %q %s", key, resp.StatusCode, resp.Header.Get("Retry-After"), data)
						return
					}
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // readiness, as an orchestrator polls it
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			resp, err := client.Get(srv.url + "/readyz")
			if err != nil {
				record("GET /readyz: %v", err)
				return
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if len(data) == 0 {
				record("GET /readyz: %d with an empty body", resp.StatusCode)
			}
			if resp.StatusCode == http.StatusServiceUnavailable {
				readyDown.Store(true)
			}
		}
	}()

	time.Sleep(2 * time.Second)
	before := next.Load()
	pg.Stop(t)
	time.Sleep(4 * time.Second)
	pg.Start(t)
	t.Log("PostgreSQL started again")
	// Load goes on until requests are acknowledged again.
	deadline := time.Now().Add(60 * time.Second)
	for after := next.Load(); next.Load() < after+200; {
		if time.Now().After(deadline) {
			t.Errorf("no request acknowledged within 60s of PostgreSQL's restart")
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("answers by status: %v; %d requests before the outage, %d acknowledged in all", statuses, before, len(acked))
	for _, b := range bad {
		t.Error(b)
	}
	for _, p := range []*serveProc{srv, apiOnly} {
		select {
		case <-p.done:
			t.Fatalf("serve exited during the outage:\n%s", tail(p.logs.String(), 40))
		default:
		}
	}
	if statuses[http.StatusServiceUnavailable] == 0 {
		t.Error("no request was answered 503 while PostgreSQL was down")
	}
	if !readyDown.Load() {
		t.Error("/readyz never said not ready while PostgreSQL was down")
	}
	if !strings.Contains(srv.logs.String(), "trying again") || !strings.Contains(srv.logs.String(), "position=") {
		t.Errorf("serve's log does not show the outage with positions:\n%s", tail(srv.logs.String(), 30))
	}

	// Every acknowledged request is in the log and runs to its end.
	for id := range acked {
		for {
			var v projections.ExecutionView
			_, err := call(ctx, "GET", srv.url+"/api/v1/executions/"+id, nil, nil, &v)
			if err == nil && v.Status.Terminal() {
				if v.Status != domain.StatusCompleted {
					t.Errorf("execution %s ended %s", id, v.Status)
				}
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("execution %s: %v (last status %s)", id, err, v.Status)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, p := range []*serveProc{srv, apiOnly} {
		for deadline := time.Now().Add(30 * time.Second); ; {
			code, _ := call(ctx, "GET", p.url+"/readyz", nil, nil, nil)
			if code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz is %d 30s after the outage", code)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The API-only serve's read model followed the log through the outage.
	for id := range acked {
		waitExecution(ctx, t, apiOnly.url, id, func(x wire.Execution) bool { return x.Status == string(domain.StatusCompleted) })
	}
	apiOnly.stop(t)
	srv.stop(t)
	if out, err := exec.Command(bin, "audit", "--store", pg.URL).CombinedOutput(); err != nil {
		t.Errorf("audit: %v\n%s", err, tail(string(out), 30))
	}
}
