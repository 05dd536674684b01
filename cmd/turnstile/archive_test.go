package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/archive"
	"github.com/turnstile/turnstile/eventstore/archive/archivetest"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/node"
)

// runExecutions runs a node on store until n echo executions completed, and
// returns their ids. Execution i's input is input formatted with i.
func runExecutions(t *testing.T, store eventstore.Store, n int, input string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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
		id, _, err := nd.Commands.Request(ctx, command.Request{Action: "r.echo", Input: json.RawMessage(fmt.Sprintf(input, i))})
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

// The CLI over archive + live log: a log archived but not trimmed yet (a
// crash between the two) reads every event once, and the audit, replay and
// an execution's state are what they are over the live log alone.
func TestReplayAndAuditWithArchive(t *testing.T) {
	dir := t.TempDir()
	ids := writeLog(t, dir, 8)
	data, arch := dir, filepath.Join(dir, "archive")
	a := archiveLog(t, dir, 5, 15)
	head := a.End() + 5
	if len(a.Segments()) < 3 {
		t.Fatalf("%d segments: the reads below cross no segment", len(a.Segments()))
	}
	for _, args := range [][]string{
		{"audit", "--data", data},
		{"replay", "--data", data, "--json"},
		{"replay", "--data", data},
		{"replay", "--data", data, "--stream", domain.ExecutionStream(ids[3]), "--state", "--json"},
		{"replay", "--data", data, "--state", "--json", "--as-of", fmt.Sprint(head - 7)},
	} {
		code, live, errs := runInProcess(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		code, both, errs := runInProcess(append(args, "--archive", arch)...)
		// The archive fills the chain hash of events from a store that
		// keeps none: compare the rest.
		both = noHash.ReplaceAllString(both, "")
		if code != 0 || both != noHash.ReplaceAllString(live, "") {
			t.Fatalf("%v --archive: exit %d %s\n%s\nwithout the archive:\n%s", args, code, errs, both, live)
		}
	}
	if code, _, errs := runInProcess("audit", "--data", data, "--archive", filepath.Join(dir, "nope")); code != 2 || !strings.Contains(errs, "not a directory") {
		t.Fatalf("audit --archive of no directory: exit %d %s", code, errs)
	}
}

// After a real trim (the memstore's), the live log alone no longer audits,
// and archive + live log audits as the whole log did.
func TestAuditAcrossATrim(t *testing.T) {
	ctx := context.Background()
	live := memstore.New(memstore.Options{})
	ids := runExecutions(t, live, 12, `{"i": %d, "html": "<&>"}`)
	before, err := projections.Audit(ctx, live, nil)
	if err != nil || !before.OK() {
		t.Fatalf("audit before: %v %+v", err, before)
	}
	head, _ := live.Head(ctx)
	var keep []string
	for _, e := range archivetest.ReadAll(t, live, 0) {
		if cat, _ := domain.SplitStream(e.Stream); cat != domain.StreamExecution {
			keep = append(keep, e.Stream)
		}
	}
	a := archivetest.Open(t, t.TempDir())
	archivetest.Move(t, a, live, head, keep)
	if _, err := projections.Audit(ctx, live, nil); !errors.Is(err, eventstore.ErrTrimmed) {
		t.Fatalf("audit of the trimmed live log alone: %v, want ErrTrimmed", err)
	}
	h := archive.History{Archive: a, Live: live}
	after, err := projections.Audit(ctx, h, nil)
	if err != nil || !after.OK() || after.Events != before.Events || after.Executions != before.Executions || after.Ended != 12 {
		t.Fatalf("audit over archive + live log: %v\n%+v\nwant %+v", err, after, before)
	}
	x, found, err := projections.ExecutionAsOf(ctx, h, ids[5], projections.Cut{Position: ^uint64(0)})
	if err != nil || !found || x.Status != domain.StatusCompleted {
		t.Fatalf("archived execution: %+v %v %v", x, found, err)
	}
}

var noHash = regexp.MustCompile(`,"hash":"[0-9a-f]{64}"`)
