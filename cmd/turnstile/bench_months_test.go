package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchMonths runs a small `bench months` and checks what each window
// reports: the log grows, the live log's start follows the checkpoints once
// the archiver has run, the archive fills, and every memory figure is there.
// With --in-flight 50 the submitters never run more than 50 executions ahead
// of the ends, which the bench would deadlock on if a token were lost.
func TestBenchMonths(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"bench", "months", "--executions", "3000", "--windows", "3", "--actions", "3",
		"--max-concurrent", "2", "--workers", "2", "--in-flight", "50", "--checkpoint-every", "200ms", "--archive-after", "400ms",
		"--archive-segment-events", "1000", "--json", "--dir", t.TempDir()}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("bench months exited %d:\n%s%s", code, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want one per window:\n%s", len(lines), stdout.String())
	}
	var prev monthsWindow
	for i, l := range lines {
		var w monthsWindow
		if err := json.Unmarshal([]byte(l), &w); err != nil {
			t.Fatalf("window %d: %v: %s", i+1, err, l)
		}
		if w.Window != i+1 || w.Events < prev.Events+6*1000 || w.RSSBytes <= 0 || w.RSSMedianBytes <= 0 || w.RSSFreedBytes <= 0 || w.HeapBytes == 0 || w.LiveBytes <= 0 {
			t.Errorf("window %d: implausible %s", i+1, l)
		}
		if i > 0 && (w.LiveStart == 0 || w.ArchiveEvents == 0 || w.LiveStart > w.Checkpoint) {
			t.Errorf("window %d: nothing archived, or the live log starts past the newest checkpoint: %s", i+1, l)
		}
		prev = w
	}
}
