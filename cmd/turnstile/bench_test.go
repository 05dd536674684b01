package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchLifecycle runs a small `bench lifecycle` in-process on a fresh
// embedded store and checks its JSON line (API.md's contract) and the
// profile and trace files it was asked for.
func TestBenchLifecycle(t *testing.T) {
	dir := t.TempDir()
	trace, cpu, mem := filepath.Join(dir, "run.trace"), filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "mem.prof")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"bench", "lifecycle", "--executions", "300", "--actions", "3", "--max-concurrent", "2",
		"--submitters", "8", "--workers", "2", "--json", "--trace", trace, "--cpuprofile", cpu, "--memprofile", mem}, &stdout, &stderr)
	out := stdout.String()
	if code != 0 {
		t.Fatalf("bench lifecycle exited %d:\n%s%s", code, out, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var res struct {
		Executions     int     `json:"executions"`
		Seconds        float64 `json:"seconds"`
		ExecutionsPerS float64 `json:"executions_per_s"`
		P50            float64 `json:"p50_ms"`
		P99            float64 `json:"p99_ms"`
		PeakRSS        int64   `json:"peak_rss_bytes"`
		Events         uint64  `json:"events"`
		Store          string  `json:"store"`
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &raw); err != nil {
		t.Fatalf("the last line is not JSON: %v\n%s", err, out)
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatal(err)
	}
	if res.Executions != 300 || res.Seconds <= 0 || res.ExecutionsPerS <= 0 || res.P50 < 0 || res.P99 < res.P50 || res.PeakRSS <= 0 || res.Store != "embedded" {
		t.Errorf("implausible result: %+v", res)
	}
	if res.Events < 6*300 { // requested, scheduling, granted, scheduled, running, completed
		t.Errorf("%d events for 300 executions, want at least 1,800", res.Events)
	}
	for _, k := range []string{"subscription_lag_p50_ms", "subscription_lag_p99_ms"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("no %s in %s", k, lines[len(lines)-1])
		}
	}
	for path, magic := range map[string][]byte{trace: []byte("go 1."), cpu: {0x1f, 0x8b}, mem: {0x1f, 0x8b}} {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.HasPrefix(b, magic) {
			t.Errorf("%s: %d bytes starting %q (%v), want a file starting %q", filepath.Base(path), len(b), b[:min(len(b), 8)], err, magic)
		}
	}
}

// TestBenchLifecycleRefusesBadFlags: bad flags are a usage error (exit 2)
// that names the problem, before anything runs.
func TestBenchLifecycleRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--executions", "0"},
		{"--rate", "-1"},
		{"--no-such-flag"},
	} {
		code, out := runCmd(t, append([]string{"bench", "lifecycle"}, args...)...)
		if code != 2 || !strings.Contains(out, strings.TrimLeft(args[0], "-")) {
			t.Errorf("bench lifecycle %v: exit %d, want 2 and a message naming %s:\n%s", args, code, args[0], out)
		}
	}
}
