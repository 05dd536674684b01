package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/projections"
)

// writeLog runs a node on an embedded store in dir until n echo executions
// completed, and returns their ids.
func writeLog(t *testing.T, dir string, n int) []string {
	t.Helper()
	store, err := embedded.Open(filepath.Join(dir, "log"), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	return runExecutions(t, store, n, `{"i":%d}`)
}

// runInProcess runs the CLI in this process with args and returns its exit
// code, standard output and standard error.
func runInProcess(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestReplayAndRebuildCommands(t *testing.T) {
	dir := t.TempDir()
	ids := writeLog(t, dir, 5)

	code, out, errs := runInProcess("replay", "--data", dir, "--type", domain.TypeExecutionCompleted, "--json")
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

	code, out, errs = runInProcess("replay", "--data", dir, "--stream", domain.ExecutionStream(ids[0]), "--state", "--json")
	var x projections.ExecutionView
	if code != 0 || json.Unmarshal([]byte(out), &x) != nil || x.Status != domain.StatusCompleted {
		t.Fatalf("replay --state: exit %d, %s %s", code, out, errs)
	}
	code, out, _ = runInProcess("replay", "--data", dir, "--stream", domain.ExecutionStream(ids[0]), "--state", "--json", "--as-of", "0")
	if code != 3 || out != "" {
		t.Errorf("replay --state before the execution existed: exit %d, %q (want 3, nothing)", code, out)
	}

	code, out, errs = runInProcess("rebuild", "--data", dir)
	if code != 0 || !strings.Contains(out, "equals the live one") {
		t.Fatalf("rebuild: exit %d: %s %s", code, out, errs)
	}
	code, out, _ = runInProcess("audit", "--data", dir)
	if code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("audit: exit %d: %s", code, out)
	}
	if code, _, _ := runInProcess("replay", "--data", dir, "--stream", "execution-nope"); code != 3 {
		t.Errorf("replay of a missing stream: exit %d, want 3", code)
	}
	if code, _, _ := runInProcess("replay", "--data", dir, "--as-of", "yesterday"); code != 2 {
		t.Errorf("replay --as-of yesterday: exit %d, want 2", code)
	}
}
