package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/archive"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/node"
)

// TestAuditTrimmedLiveLog: on an embedded log (and a PostgreSQL one, when a
// database is configured) the archiver trimmed behind its checkpoints, `turnstile audit` without --archive audits the live log
// from the oldest checkpoint at or after its start, says so and what it
// could not judge, and is clean; --archive still audits the whole history.
// An event written after the checkpoint that breaks the handoff rule (a
// second end of an execution that ended in the live log) is found by both.
func TestAuditTrimmedLiveLog(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		dir := t.TempDir()
		auditTrimmedLiveLog(t, []string{"--data", dir}, func() (eventstore.Store, error) {
			return embedded.Open(filepath.Join(dir, "log"), embedded.Options{})
		})
	})
	t.Run("postgres", func(t *testing.T) {
		storeURL := pgFreshSchemaURL(t)
		if code, out := runCmd(t, "migrate", "--store", storeURL); code != 0 {
			t.Fatalf("migrate: %s", out)
		}
		auditTrimmedLiveLog(t, []string{"--store", storeURL}, func() (eventstore.Store, error) {
			s, _, err := openStore(storeURL, "")
			return s, err
		})
	})
}

func auditTrimmedLiveLog(t *testing.T, where []string, open func() (eventstore.Store, error)) {
	ctx := context.Background()
	archDir := filepath.Join(t.TempDir(), "archive")
	store, err := open()
	if err != nil {
		t.Fatal(err)
	}
	arch, err := archive.Open(archDir)
	if err != nil {
		t.Fatal(err)
	}
	nd, err := node.Start(ctx, store, node.Config{Workers: 1, Slots: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		CheckpointEvery: 50 * time.Millisecond, Archive: arch, ArchiveAfter: 200 * time.Millisecond, ArchiveEvery: 20 * time.Millisecond, StopGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nd.Commands.DefineAction(ctx, domain.Policy{Ref: "r.echo", Runner: "core.echo", MaxConcurrent: 2}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second) // a failure guard, not a timing assertion
	for nd.Archiver.Rounds.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d trims", nd.Archiver.Rounds.Load())
		}
		for range 3 {
			if _, _, err := nd.Commands.Request(ctx, command.Request{Action: "r.echo", Input: json.RawMessage(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	nd.Stop()
	first, _, err := store.(eventstore.Trimmer).Start(ctx)
	if err != nil || first == 0 {
		t.Fatalf("live log from %d: %v", first, err)
	}
	// An execution requested and completed in the live log.
	var ended string
	evs, err := store.ReadAll(ctx, first, 100_000)
	if err != nil {
		t.Fatal(err)
	}
	requested := map[string]bool{}
	for _, e := range evs {
		cat, id := domain.SplitStream(e.Stream)
		switch {
		case cat == domain.StreamExecution && e.Type == domain.TypeExecutionRequested:
			requested[id] = true
		case cat == domain.StreamExecution && e.Type == domain.TypeExecutionCompleted && requested[id]:
			ended = id
		}
	}
	if ended == "" {
		t.Fatal("no execution requested and completed in the live log")
	}
	arch.Close()
	store.Close()

	runAudit := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append(append([]string{"audit"}, where...), args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, errs := runAudit()
	if code != 0 || !strings.Contains(out, "started at:  the checkpoint at ") || !strings.Contains(out, "not judged:") || !strings.Contains(out, "result:      OK") {
		t.Fatalf("audit of the trimmed live log: exit %d\n%s%s", code, out, errs)
	}
	t.Logf("%s", out)
	code, out, errs = runAudit("--json")
	var rep projections.AuditReport
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || rep.From == nil || rep.From.Checkpoint < first || rep.From.LiveStart != first {
		t.Fatalf("audit --json: exit %d %v %+v\n%s", code, err, rep.From, errs)
	}
	if code, out, errs := runAudit("--archive", archDir); code != 0 || strings.Contains(out, "started at:") {
		t.Fatalf("audit --archive: exit %d\n%s%s", code, out, errs)
	}

	// A second end of the execution, after the checkpoint.
	store, err = open()
	if err != nil {
		t.Fatal(err)
	}
	env, err := codec.Events.Encode(uuid.New(), domain.ExecutionFailed{Error: "again"}, domain.OwnerWorker, "local-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, domain.ExecutionStream(ended), eventstore.Any, env); err != nil {
		t.Fatal(err)
	}
	store.Close()
	for _, args := range [][]string{nil, {"--archive", archDir}} {
		code, out, errs := runAudit(args...)
		if code != 1 || !strings.Contains(out, "execution-"+ended+" execution.failed") || !strings.Contains(out, "[terminal]") {
			t.Fatalf("audit %v of the log with a second end: exit %d\n%s%s", args, code, out, errs)
		}
	}
}
