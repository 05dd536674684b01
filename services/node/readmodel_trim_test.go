package node

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/archive"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
)

// TestReadModelFromACheckpointKeepsTheStatistics: executions of two
// actions (one completes, one fails) run to their end while the archiver
// trims the live log behind checkpoints again and again; a read model
// started as serve starts it on the trimmed log (no snapshot: from the
// newest checkpoint) shows queue_stats equal to those of a fold of archive
// + live log from position 0, at the same position.
func TestReadModelFromACheckpointKeepsTheStatistics(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	defer store.Close()
	arch, err := archive.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	n, err := Start(ctx, store, Config{Workers: 2, Slots: 4, Logger: log, CheckpointEvery: 50 * time.Millisecond,
		Archive: arch, ArchiveAfter: 200 * time.Millisecond, ArchiveEvery: 20 * time.Millisecond, StopGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []domain.Policy{{Ref: "ok", Runner: "core.noop", MaxConcurrent: 3}, {Ref: "bad", Runner: "core.fail", MaxConcurrent: 2}} {
		if _, err := n.Commands.DefineAction(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	requested := 0
	deadline := time.Now().Add(60 * time.Second) // a failure guard, not a timing assertion
	for n.Archiver.Rounds.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d trims", n.Archiver.Rounds.Load())
		}
		for _, ref := range []string{"ok", "ok", "bad"} {
			if _, _, err := n.Commands.Request(ctx, command.Request{Action: ref}); err != nil {
				t.Fatal(err)
			}
			requested++
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.Stop()

	first, _, err := store.Start(ctx)
	if err != nil || first == 0 {
		t.Fatalf("the live log starts at %d: %v", first, err)
	}
	views, err := startViewsInLiveLog(ctx, store, projections.NewViews(), log)
	if err != nil {
		t.Fatal(err)
	}
	if err := views.CatchUp(ctx, store); err != nil {
		t.Fatal(err)
	}
	whole := projections.NewViews()
	if err := whole.CatchUpTo(ctx, archive.History{Archive: arch, Live: store}, views.Next()); err != nil {
		t.Fatal(err)
	}
	known, _, _ := views.List(projections.ListFilter{Limit: projections.MaxListLimit})
	all, _, _ := whole.List(projections.ListFilter{Limit: projections.MaxListLimit})
	if len(all) != requested || len(known) >= len(all) {
		t.Fatalf("the read model from the checkpoint knows %d executions, the whole log %d of %d requested: it did not start from a checkpoint", len(known), len(all), requested)
	}
	got, _ := json.Marshal(views.AllStats())
	want, _ := json.Marshal(whole.AllStats())
	if !bytes.Equal(got, want) {
		t.Fatalf("queue_stats of the read model started from a checkpoint at or after %d\n%s\nof a fold of archive + live log from 0\n%s", first, got, want)
	}
	for _, s := range whole.AllStats() {
		if s.TotalEnqueued == 0 || s.TotalCompleted+s.TotalFailed == 0 {
			t.Fatalf("nothing counted: %+v", s)
		}
	}
	t.Logf("live log from %d; %s", first, got)
}
