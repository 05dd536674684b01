package archiver_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/archive"
	"github.com/turnstile/turnstile/eventstore/archive/archivetest"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/internal/waitfor"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/node"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestArchivesBehindCheckpoints runs the executor, two workers and the
// archiver on one log (checkpoints every 50 ms of log time, archived once
// 200 ms old) while executions are requested in waves: the live log is
// trimmed again and again, the archive continues it, and archive + live
// log audit clean with every execution ended exactly once. A second node
// on the same log then starts from the newest checkpoint (the log before
// it is gone) and runs more executions to their end.
func TestArchivesBehindCheckpoints(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	defer store.Close()
	arch := archivetest.Open(t, t.TempDir())
	log := slog.New(slog.DiscardHandler)
	cfg := node.Config{Workers: 2, Slots: 4, Logger: log, CheckpointEvery: 50 * time.Millisecond,
		Archive: arch, ArchiveAfter: 200 * time.Millisecond, ArchiveEvery: 20 * time.Millisecond, StopGrace: time.Second}
	n, err := node.Start(ctx, store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmds := n.Commands
	if _, err := cmds.DefineAction(ctx, domain.Policy{Ref: "a", Runner: "core.noop", MaxConcurrent: 3}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	request := func(k int) {
		t.Helper()
		for range k {
			id, _, err := cmds.Request(ctx, command.Request{Action: "a"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
	}
	// An execution's stream as archive + live log tell it (an ended one
	// may have left the live log).
	history := archive.History{Archive: arch, Live: store}
	terminal := map[string]bool{domain.TypeExecutionCompleted: true, domain.TypeExecutionFailed: true,
		domain.TypeExecutionCancelled: true, domain.TypeExecutionRejected: true, domain.TypeExecutionTimedOut: true}
	ended := func() bool {
		for _, id := range ids {
			evs, err := history.ReadStream(ctx, domain.ExecutionStream(id), 0, 100)
			if err != nil || len(evs) == 0 || !terminal[evs[len(evs)-1].Type] {
				return false
			}
		}
		return true
	}
	for wave := 0; n.Archiver.Rounds.Load() < 3; wave++ {
		if wave > 400 {
			t.Fatalf("%d trims after %d waves", n.Archiver.Rounds.Load(), wave)
		}
		request(10)
		time.Sleep(20 * time.Millisecond)
	}
	waitfor.That(t, "every execution to end", ended)
	// The action's definition was archived: the command side starts its
	// stream from the newest checkpoint.
	if first, _, _ := store.Start(ctx); first == 0 {
		t.Fatal("not trimmed")
	}
	if changed, err := cmds.Pause(ctx, "a", "maintenance"); err != nil || !changed {
		t.Fatalf("pause an action whose definition was archived: changed %v: %v", changed, err)
	}
	if a, err := cmds.LoadAction(ctx, "a"); err != nil || !a.Paused() || !a.Defined() {
		t.Fatalf("the action after the pause: %+v: %v", a, err)
	}
	if changed, err := cmds.Resume(ctx, "a"); err != nil || !changed {
		t.Fatalf("resume it: changed %v: %v", changed, err)
	}
	n.Stop()

	first, _, err := store.Start(ctx)
	if err != nil || first == 0 {
		t.Fatalf("the live log starts at %d after %d trims: %v", first, n.Archiver.Rounds.Load(), err)
	}
	if end := arch.End(); end < first {
		t.Fatalf("the archive ends at %d, the live log starts at %d", end, first)
	}
	if _, err := store.ReadAll(ctx, 0, 1); !errorsIsTrimmed(err) {
		t.Fatalf("reading position 0 of the live log: %v", err)
	}
	auditWhole(t, store, arch, len(ids))

	// A restart on the trimmed log: the executor starts at a checkpoint.
	cfg.Archive = nil
	n2, err := node.Start(ctx, store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if at := n2.Executor.Position(); at < first {
		t.Fatalf("the restarted executor is at %d, below the live log's start %d", at, first)
	}
	request(20)
	waitfor.That(t, "the new executions to end", ended)
	n2.Stop()
	auditWhole(t, store, arch, len(ids))
}

func errorsIsTrimmed(err error) bool { return errors.Is(err, eventstore.ErrTrimmed) }

// auditWhole audits archive + live log from position 0: clean, and wantEnded
// executions ended, each once.
func auditWhole(t *testing.T, store eventstore.Store, arch *archive.Archive, wantEnded int) {
	t.Helper()
	h := archive.History{Archive: arch, Live: store}
	if _, err := h.Continues(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep, err := projections.Audit(context.Background(), h, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range rep.Violations {
		if i < 20 {
			t.Errorf("audit: %d %s %s: %s: %s", v.Position, v.Stream, v.Type, v.Rule, v.Detail)
		}
	}
	if rep.Ended != wantEnded || rep.Executions != wantEnded {
		t.Fatalf("audit over archive + live log: %d executions, %d ended, want %d", rep.Executions, rep.Ended, wantEnded)
	}
	t.Logf("audit over archive + live log: %d events, %d executions ended", rep.Events, rep.Ended)
}
