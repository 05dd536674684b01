package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/node"
)

// writeLog runs a node on an embedded store in dir until n echo executions
// completed, and returns their ids.
func writeLog(t *testing.T, dir string, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := embedded.Open(filepath.Join(dir, "log"), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	nd, err := node.Start(ctx, store, node.Config{Workers: 1, Slots: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Stop()
	if _, err := nd.Commands.DefineAction(ctx, domain.Policy{Ref: "r.echo", Runner: "core.echo", MaxConcurrent: 2}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range n {
		id, _, err := nd.Commands.Request(ctx, command.Request{Action: "r.echo", Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	v := projections.NewViews()
	for {
		if err := v.CatchUp(ctx, store); err != nil {
			t.Fatal(err)
		}
		if st, ok := v.Stats("r.echo"); ok && st.TotalCompleted == uint64(n) {
			return ids
		}
		if ctx.Err() != nil {
			t.Fatal("executions did not complete")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestReplayAndRebuildCommands(t *testing.T) {
	dir := t.TempDir()
	ids := writeLog(t, dir, 5)
	ctx := context.Background()
	runCmd := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, args, &out, &errb)
		return code, out.String(), errb.String()
	}

	code, out, errs := runCmd("replay", "--data", dir, "--type", domain.TypeExecutionCompleted, "--json")
	if code != 0 {
		t.Fatalf("replay: exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 {
		t.Fatalf("replay --type completed printed %d lines:\n%s", len(lines), out)
	}
	for _, l := range lines {
		var env domain.Envelope
		if err := json.Unmarshal([]byte(l), &env); err != nil || env.Type != domain.TypeExecutionCompleted {
			t.Fatalf("replay line %q: %v", l, err)
		}
	}

	code, out, errs = runCmd("replay", "--data", dir, "--stream", domain.ExecutionStream(ids[0]), "--state", "--json")
	var x projections.ExecutionView
	if code != 0 || json.Unmarshal([]byte(out), &x) != nil || x.Status != domain.StatusCompleted {
		t.Fatalf("replay --state: exit %d, %s %s", code, out, errs)
	}
	code, out, _ = runCmd("replay", "--data", dir, "--stream", domain.ExecutionStream(ids[0]), "--state", "--json", "--as-of", "0")
	if code != 3 || out != "" {
		t.Errorf("replay --state before the execution existed: exit %d, %q (want 3, nothing)", code, out)
	}

	code, out, errs = runCmd("rebuild", "--data", dir)
	if code != 0 || !strings.Contains(out, "equals the live one") {
		t.Fatalf("rebuild: exit %d: %s %s", code, out, errs)
	}
	code, out, _ = runCmd("audit", "--data", dir)
	if code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("audit: exit %d: %s", code, out)
	}
	if code, _, _ := runCmd("replay", "--data", dir, "--stream", "execution-nope"); code != 3 {
		t.Errorf("replay of a missing stream: exit %d, want 3", code)
	}
	if code, _, _ := runCmd("replay", "--data", dir, "--as-of", "yesterday"); code != 2 {
		t.Errorf("replay --as-of yesterday: exit %d, want 2", code)
	}
}
