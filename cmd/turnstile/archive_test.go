package main

import (
	"bytes"
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
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/node"
)

// runExecutions runs a node on store until n echo executions completed, and
// returns their ids.
func runExecutions(t *testing.T, store eventstore.Store, n int) []string {
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
		id, _, err := nd.Commands.Request(ctx, command.Request{Action: "r.echo", Input: json.RawMessage(fmt.Sprintf(`{"i": %d, "html": "<&>"}`, i))})
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
	ctx := context.Background()
	store, err := embedded.Open(filepath.Join(dir, "log"), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	head, _ := store.Head(ctx)
	a, err := archive.Open(arch)
	if err != nil {
		t.Fatal(err)
	}
	a.SetSegmentEvents(int(head/3 + 1))
	if err := a.Write(ctx, store, 0, head-5); err != nil {
		t.Fatal(err)
	}
	a.Close()
	store.Close()
	runCmd := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, args, &out, &errb)
		return code, out.String(), errb.String()
	}
	for _, args := range [][]string{
		{"audit", "--data", data},
		{"replay", "--data", data, "--json"},
		{"replay", "--data", data},
		{"replay", "--data", data, "--stream", domain.ExecutionStream(ids[3]), "--state", "--json"},
		{"replay", "--data", data, "--state", "--json", "--as-of", fmt.Sprint(head - 7)},
	} {
		code, live, errs := runCmd(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		code, both, errs := runCmd(append(args, "--archive", arch)...)
		// The archive fills the chain hash of events from a store that
		// keeps none: compare the rest.
		both = noHash.ReplaceAllString(both, "")
		if code != 0 || both != noHash.ReplaceAllString(live, "") {
			t.Fatalf("%v --archive: exit %d %s\n%s\nwithout the archive:\n%s", args, code, errs, both, live)
		}
	}
	if code, _, errs := runCmd("audit", "--data", data, "--archive", filepath.Join(dir, "nope")); code != 2 || !strings.Contains(errs, "not a directory") {
		t.Fatalf("audit --archive of no directory: exit %d %s", code, errs)
	}
}

// After a real trim (the memstore's), the live log alone no longer audits,
// and archive + live log audits as the whole log did.
func TestAuditAcrossATrim(t *testing.T) {
	ctx := context.Background()
	live := memstore.New(memstore.Options{})
	ids := runExecutions(t, live, 12)
	before, err := projections.Audit(ctx, live, nil)
	if err != nil || !before.OK() {
		t.Fatalf("audit before: %v %+v", err, before)
	}
	head, _ := live.Head(ctx)
	a, err := archive.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Write(ctx, live, 0, head); err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, e := range mustReadAll(t, live) {
		if cat, _ := domain.SplitStream(e.Stream); cat != domain.StreamExecution {
			keep = append(keep, e.Stream)
		}
	}
	if err := live.Trim(ctx, head, keep); err != nil {
		t.Fatal(err)
	}
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

func mustReadAll(t *testing.T, s eventstore.Store) []domain.Envelope {
	t.Helper()
	var out []domain.Envelope
	for from := uint64(0); ; {
		evs, err := s.ReadAll(context.Background(), from, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			return out
		}
		out = append(out, evs...)
		from = evs[len(evs)-1].Position + 1
	}
}
