package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
)

// TestServeResumesFromSnapshots: a serve stopped with SIGTERM leaves
// snapshots of its two folds; the next serve starts from them and folds only
// the tail (here, requests appended while it was down), and its read model
// still equals a rebuild from position 0. A snapshot that cannot be read is
// ignored and the log folded from the start.
func TestServeResumesFromSnapshots(t *testing.T) {
	bin := turnstileBinary(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	p := startServe(t, bin, dir)
	for _, pol := range []domain.Policy{
		{Ref: "snap.run", Runner: "core.noop", MaxConcurrent: 2},
		{Ref: "snap.held", Runner: "core.noop", MaxConcurrent: 1},
	} {
		if _, err := call(ctx, "POST", p.url+"/api/v1/actions", pol, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := call(ctx, "POST", p.url+"/api/v1/actions/snap.held/pause", map[string]any{"reason": "test"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		ref := "snap.run"
		if i%4 == 0 {
			ref = "snap.held"
		}
		if code, err := call(ctx, "POST", p.url+"/api/v1/executions", map[string]any{"action": ref}, nil, nil); err != nil || code != 202 {
			t.Fatalf("request: %d %v", code, err)
		}
	}
	waitStats(ctx, t, p.url, "snap.run", func(s projections.QueueStats) bool { return s.TotalCompleted == 30 })
	p.stop(t)
	for _, name := range []string{"executor-state.snapshot", "views.snapshot"} {
		if _, err := os.Stat(filepath.Join(dir, "checkpoints", name)); err != nil {
			t.Fatalf("no snapshot after a clean stop: %v", err)
		}
	}

	// While serve is down, five more requests reach the log.
	store, err := embedded.Open(filepath.Join(dir, "log"), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cmds := &command.Service{Store: store, Writer: "test"}
	for range 5 {
		if _, _, err := cmds.Request(ctx, command.Request{Action: "snap.run"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	p = startServe(t, bin, dir)
	waitStats(ctx, t, p.url, "snap.run", func(s projections.QueueStats) bool { return s.TotalCompleted == 35 })
	for _, want := range []string{"resumed from a snapshot", "read model resumed from a snapshot"} {
		if !strings.Contains(p.logs.String(), want) {
			t.Errorf("the restarted serve did not log %q:\n%s", want, p.logs.String())
		}
	}
	if _, err := call(ctx, "POST", p.url+"/api/v1/actions/snap.held/resume", nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	waitStats(ctx, t, p.url, "snap.held", func(s projections.QueueStats) bool { return s.TotalCompleted == 10 })
	checkRebuildEqual(ctx, t, p.url)
	p.stop(t)

	// A damaged snapshot is refused, not trusted.
	if err := os.WriteFile(filepath.Join(dir, "checkpoints", "views.snapshot"), []byte("not a snapshot"), 0o644); err != nil {
		t.Fatal(err)
	}
	p = startServe(t, bin, dir)
	if !strings.Contains(p.logs.String(), "not using the read model's snapshot") {
		t.Errorf("a damaged snapshot was not reported:\n%s", p.logs.String())
	}
	waitStats(ctx, t, p.url, "snap.held", func(s projections.QueueStats) bool { return s.TotalCompleted == 10 })
	checkRebuildEqual(ctx, t, p.url)
	p.stop(t)
}

// waitStats polls one action's queue_stats until ok holds.
func waitStats(ctx context.Context, t *testing.T, base, ref string, ok func(projections.QueueStats) bool) {
	t.Helper()
	var s projections.QueueStats
	for {
		if _, err := call(ctx, "GET", base+"/api/v1/actions/"+ref+"/queue-stats", nil, nil, &s); err != nil {
			t.Fatal(err)
		}
		if ok(s) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("queue_stats of %s never got there: %+v", ref, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkRebuildEqual asks the server to rebuild its read model from position
// 0 and compare it with the live one.
func checkRebuildEqual(ctx context.Context, t *testing.T, base string) {
	t.Helper()
	var rebuild struct {
		Equal       bool     `json:"equal"`
		Differences []string `json:"differences"`
	}
	if _, err := call(ctx, "POST", base+"/api/v1/admin/rebuild", nil, nil, &rebuild); err != nil {
		t.Fatal(err)
	}
	if !rebuild.Equal {
		t.Errorf("the rebuilt read model differs from the live one: %v", rebuild.Differences)
	}
}
