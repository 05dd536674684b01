package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPythonWorkerOutlivesItsLease runs the Python example worker
// (examples/python/worker.py, standard library only) against a real
// `turnstile serve --worker-lease 2s`: a handler three leases long runs
// once and ends with its one result at attempt 1, and the worker is never
// declared lost (its Keeper thread heartbeats while the handler runs in the
// main thread). Then the duties a hand-written worker owes besides: a
// cancel reaches a running handler through a poll's cancels, and a handler
// past its deadline (timeout_seconds from the start) ends timed_out. Before
// the Keeper, the long run's result got 401, the run was handed again, and
// the execution ended failed: worker_lost.
func TestPythonWorkerOutlivesItsLease(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("SKIPPED: python3 is not installed; the Python example worker is not tested")
	}
	const lease = 2 * time.Second
	bin := turnstileBinary(t)
	dir := t.TempDir()
	srv := startServe(t, bin, dir, "--workers", "0", "--worker-lease", lease.String(), "--token", "admin:"+rwAdmin, "--token", "worker:"+rwWorker)
	script, _ := filepath.Abs("../../examples/python/worker.py")
	_, logs, _ := startWorkerProc(t, py, []string{script},
		[]string{"TURNSTILE_SERVER=" + srv.url, "TURNSTILE_TOKEN=" + rwWorker, "TURNSTILE_WORKER_NAME=py-long"})
	ctx := context.Background()
	admin := map[string]string{"Authorization": "Bearer " + rwAdmin}
	define := func(body map[string]any) {
		t.Helper()
		if _, err := call(ctx, "POST", srv.url+"/api/v1/actions", body, admin, nil); err != nil {
			t.Fatal(err)
		}
	}
	request := func(ref string, input any) string {
		t.Helper()
		var acc struct{ ID string }
		if _, err := call(ctx, "POST", srv.url+"/api/v1/executions", map[string]any{"action": ref, "input": input}, admin, &acc); err != nil {
			t.Fatal(err)
		}
		return acc.ID
	}
	type view struct {
		execView
		Attempt int `json:"attempt"`
	}
	wait := func(id string, within time.Duration, want ...string) view {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			var x view
			if _, err := call(ctx, "GET", srv.url+"/api/v1/executions/"+id, nil, admin, &x); err != nil {
				t.Fatal(err)
			}
			for _, w := range want {
				if x.Status == w {
					return x
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("execution %s is %s after %s, want %v\n%s", id, x.Status, within, want, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	final := []string{"completed", "failed", "timed_out", "cancelled"}

	// A handler three leases long: one run, one result, attempt 1.
	define(map[string]any{"ref": "py.long", "runner": "py.sleep", "max_concurrent": 1, "max_attempts": 3})
	id := request("py.long", map[string]any{"seconds": 3 * lease.Seconds()})
	x := wait(id, 3*lease+20*time.Second, final...)
	if x.Status != "completed" || x.Attempt != 1 || x.Worker != "py-long" || string(x.Result) != `{"slept":6.0}` && string(x.Result) != `{"slept":6}` {
		t.Fatalf("the long run: %+v\n%s", x, logs.String())
	}
	var stream struct {
		Events []struct {
			Type string `json:"type"`
		} `json:"events"`
	}
	if _, err := call(ctx, "GET", srv.url+"/api/v1/streams/worker-py-long", nil, admin, &stream); err != nil {
		t.Fatal(err)
	}
	registered := 0
	for _, e := range stream.Events {
		switch e.Type {
		case "worker.lost":
			t.Errorf("the Python worker was declared lost while its handler ran\n%s", logs.String())
		case "worker.registered":
			registered++
		}
	}
	if registered != 1 {
		t.Errorf("the Python worker registered %d times, want once\n%s", registered, logs.String())
	}

	// A cancel reaches the running handler (its Keeper polls with "max":0).
	define(map[string]any{"ref": "py.cancel", "runner": "py.sleep", "max_concurrent": 1})
	id = request("py.cancel", map[string]any{"seconds": 60})
	wait(id, 10*time.Second, "running")
	if _, err := call(ctx, "POST", srv.url+"/api/v1/executions/"+id+"/cancel", nil, admin, nil); err != nil {
		t.Fatal(err)
	}
	if x := wait(id, 10*time.Second, final...); x.Status != "cancelled" || x.Worker != "py-long" {
		t.Errorf("the cancelled run: %+v\n%s", x, logs.String())
	}

	// A handler past its deadline: timed_out, by the worker's own report.
	define(map[string]any{"ref": "py.late", "runner": "py.sleep", "max_concurrent": 1, "timeout_seconds": 1})
	id = request("py.late", map[string]any{"seconds": 60})
	if x := wait(id, 15*time.Second, final...); x.Status != "timed_out" || x.Worker != "py-long" {
		t.Errorf("the run past its deadline: %+v\n%s", x, logs.String())
	}
	if strings.Contains(logs.String(), "registering again") {
		t.Errorf("the Python worker's incarnation ended:\n%s", logs.String())
	}
	srv.stop(t)
	if out, err := exec.Command(bin, "audit", "--data", dir).CombinedOutput(); err != nil {
		t.Fatalf("audit: %v\n%s", err, out)
	}
}
