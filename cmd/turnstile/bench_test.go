package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/command"
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
		{"--priorities", "5"},
		{"--priorities", "-1"},
		{"--keys", "-1"},
		{"--total", "-1"},
		{"--total", "10"}, // without --keys
	} {
		code, out := runCmd(t, append([]string{"bench", "lifecycle"}, args...)...)
		if code != 2 || !strings.Contains(out, strings.TrimLeft(args[0], "-")) {
			t.Errorf("bench lifecycle %v: exit %d, want 2 and a message naming %s:\n%s", args, code, args[0], out)
		}
	}
}

// TestBenchLifecycleMixed runs a small mixed `bench lifecycle` (priorities,
// a concurrency key, a total limit) to its end and checks its JSON line says
// so, and that what a mixed request draws is seeded and in range.
func TestBenchLifecycleMixed(t *testing.T) {
	code, out := runCmd(t, "bench", "lifecycle", "--executions", "200", "--actions", "2", "--max-concurrent", "1",
		"--priorities", "4", "--keys", "7", "--total", "3", "--submitters", "4", "--workers", "2", "--json")
	if code != 0 {
		t.Fatalf("mixed bench lifecycle exited %d:\n%s", code, out)
	}
	var line string // runCmd mixes in stderr's log lines
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "{") {
			line = l
		}
	}
	var res struct {
		Executions         int `json:"executions"`
		Priorities         int `json:"priorities"`
		Keys               int `json:"keys"`
		MaxConcurrentTotal int `json:"max_concurrent_total"`
	}
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		t.Fatalf("no JSON line: %v\n%s", err, out)
	}
	if res.Executions != 200 || res.Priorities != 4 || res.Keys != 7 || res.MaxConcurrentTotal != 3 {
		t.Errorf("result %+v, want 200 executions, priorities 4, keys 7, max_concurrent_total 3", res)
	}

	m := benchMix{priorities: 4, keys: 7, total: 3, seed: 1}
	prios, keys := map[int]bool{}, map[string]bool{}
	for i := int64(0); i < 1000; i++ {
		r := m.request(command.Request{Action: "a"}, i)
		if again := m.request(command.Request{Action: "a"}, i); again.Priority != r.Priority || string(again.Input) != string(r.Input) {
			t.Fatalf("request %d drew %d %s, then %d %s", i, r.Priority, r.Input, again.Priority, again.Input)
		}
		prios[r.Priority] = true
		var in map[string]string
		if err := json.Unmarshal(r.Input, &in); err != nil {
			t.Fatal(err)
		}
		keys[in[benchMixKey]] = true
	}
	if len(prios) != 4 || !prios[1] || !prios[4] || len(keys) != 7 {
		t.Errorf("1,000 requests drew priorities %v and key values %v, want 1..4 and 7 values", prios, keys)
	}
	if p := m.policy(domain.Policy{Ref: "a"}); p.ConcurrencyKey != benchMixKey || p.MaxConcurrentTotal != 3 {
		t.Errorf("policy %+v, want concurrency_key %q and max_concurrent_total 3", p, benchMixKey)
	}
	if got := m.perAction(1); got != 3 {
		t.Errorf("perAction with a total of 3: %d, want 3 (the default slots come from it)", got)
	}
}
