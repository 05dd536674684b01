package repository_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/repository"
)

// TestStreamsWhoseStartWasArchived: after a trim behind a checkpoint, a
// worker whose every event was archived loads as the checkpoint holds it
// (so it registers again at the right version), a waiting execution whose
// request was archived loads as requested, and one whose start was
// archived but not its end loads whole; without a checkpoint the load
// fails with ErrNoBase instead of passing the stream's start over.
func TestStreamsWhoseStartWasArchived(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	put := func(stream string, owner domain.Owner, writer string, ev domain.Event) {
		t.Helper()
		env, err := codec.Events.Encode(uuid.New(), ev, owner, writer)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Append(ctx, stream, eventstore.Any, env); err != nil {
			t.Fatal(err)
		}
	}
	put(domain.ActionStream("a"), domain.OwnerAPI, "", domain.ActionDefined{Policy: domain.Policy{Ref: "a", Runner: "core.noop", MaxConcurrent: 1}.WithDefaults()})
	put(domain.WorkerStream("w1"), domain.OwnerWorker, "w1", domain.WorkerRegistered{Slots: 1, Incarnation: "i1"})
	put(domain.WorkerStream("w1"), domain.OwnerWorker, "w1", domain.WorkerStopped{Incarnation: "i1"})
	put(domain.ExecutionStream("x1"), domain.OwnerExecutor, "e", domain.ExecutionRequested{Action: "a"})
	put(domain.ExecutionStream("x2"), domain.OwnerExecutor, "e", domain.ExecutionRequested{Action: "a"})
	put(domain.QueueStream("a"), domain.OwnerExecutor, "e", domain.QueueGranted{Execution: "x2"})
	put(domain.ExecutionStream("x2"), domain.OwnerExecutor, "e", domain.ExecutionScheduling{})

	// Trimmed with no checkpoint to start from: refused, not guessed.
	noBase := memstore.New(memstore.Options{})
	evs, _ := store.ReadAll(ctx, 0, 100)
	for _, e := range evs {
		e.Position, e.Version = 0, 0
		if _, err := noBase.Append(ctx, e.Stream, eventstore.Any, e); err != nil {
			t.Fatal(err)
		}
	}
	put2 := func(s *memstore.Store, stream string) {
		env, _ := codec.Events.Encode(uuid.New(), domain.ExecutionCancelRequested{Reason: "r"}, domain.OwnerAPI, "")
		if _, err := s.Append(ctx, stream, eventstore.Any, env); err != nil {
			t.Fatal(err)
		}
	}
	head, _ := noBase.Head(ctx)
	put2(noBase, domain.ExecutionStream("x2"))
	if err := noBase.Trim(ctx, head, []string{domain.ExecutionStream("x2")}); err != nil {
		t.Fatal(err)
	}
	if _, err := repository.LoadExecution(ctx, noBase, "x2"); !errors.Is(err, repository.ErrNoBase) {
		t.Fatalf("a trimmed stream with no checkpoint: %v", err)
	}

	st := projections.NewState()
	evs, _ = store.ReadAll(ctx, 0, 100)
	for i := range evs {
		_ = st.Apply(&evs[i])
	}
	m, err := projections.WriteCheckpoint(ctx, store, st.Snapshot(), evs[len(evs)-1].Hash, "e", nil)
	if err != nil {
		t.Fatal(err)
	}
	put2(store, domain.ExecutionStream("x2")) // x2 continues after the checkpoint
	sn, err := projections.ReadCheckpoint(ctx, store, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Trim(ctx, m.Position, append(m.Keep, projections.LiveStreams(sn)...)); err != nil {
		t.Fatal(err)
	}

	w, err := repository.LoadWorker(ctx, store, "w1")
	if err != nil || w.Version() != 1 || w.Status() != domain.WorkerStoppedStatus {
		t.Fatalf("worker w1: version %d status %v: %v", w.Version(), w.Status(), err)
	}
	x1, err := repository.LoadExecution(ctx, store, "x1")
	if err != nil || x1.Status() != domain.StatusRequested || x1.Version() != 0 || x1.Action() != "a" {
		t.Fatalf("x1: %v version %d: %v", x1.Status(), x1.Version(), err)
	}
	x2, err := repository.LoadExecution(ctx, store, "x2")
	if err != nil || x2.Status() != domain.StatusScheduling || x2.Version() != 2 {
		t.Fatalf("x2: %v version %d: %v", x2.Status(), x2.Version(), err)
	}
}

// TestWorkerCatchUpAcrossATrim: a worker state known from before a trim is
// brought up to date from the checkpoint, not by applying the live log's
// later events over the archived ones: w1 was declared lost and registered
// anew before the checkpoint, so its state says the new incarnation; w2 has
// no event past the checkpoint, so a heartbeat at the known version loses
// its race and is written after a reload, not refused after every retry.
func TestWorkerCatchUpAcrossATrim(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	put := func(stream string, owner domain.Owner, ev domain.Event) {
		t.Helper()
		env, err := codec.Events.Encode(uuid.New(), ev, owner, "w")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Append(ctx, stream, eventstore.Any, env); err != nil {
			t.Fatal(err)
		}
	}
	w1, w2 := domain.WorkerStream("w1"), domain.WorkerStream("w2")
	put(w1, domain.OwnerWorker, domain.WorkerRegistered{Slots: 1, Incarnation: "i1"})
	put(w2, domain.OwnerWorker, domain.WorkerRegistered{Slots: 1, Incarnation: "j1"})
	known1, err := repository.LoadWorker(ctx, store, "w1")
	if err != nil {
		t.Fatal(err)
	}
	known2, err := repository.LoadWorker(ctx, store, "w2")
	if err != nil {
		t.Fatal(err)
	}
	put(w1, domain.OwnerExecutor, domain.WorkerLost{Incarnation: "i1", Reason: "lease"})
	put(w1, domain.OwnerWorker, domain.WorkerRegistered{Slots: 2, Incarnation: "i2"})
	put(w2, domain.OwnerWorker, domain.WorkerHeartbeat{Incarnation: "j1"})

	st := projections.NewState()
	evs, _ := store.ReadAll(ctx, 0, 100)
	for i := range evs {
		_ = st.Apply(&evs[i])
	}
	m, err := projections.WriteCheckpoint(ctx, store, st.Snapshot(), evs[len(evs)-1].Hash, "e", nil)
	if err != nil {
		t.Fatal(err)
	}
	put(w1, domain.OwnerWorker, domain.WorkerHeartbeat{Incarnation: "i2", InFlight: 1})
	if err := store.Trim(ctx, m.Position, m.Keep); err != nil {
		t.Fatal(err)
	}

	got, err := repository.CatchUpWorker(ctx, store, "w1", known1)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version() != 3 || got.Incarnation() != "i2" || got.Status() != domain.WorkerActive || got.Slots() != 2 {
		t.Fatalf("w1 caught up across the trim: version %d incarnation %s %v slots %d, want 3 i2 active 2",
			got.Version(), got.Incarnation(), got.Status(), got.Slots())
	}
	if known1.Version() != 0 {
		t.Fatal("CatchUpWorker changed the state it was given")
	}

	w, err := repository.UpdateWorker(ctx, store, "w2", domain.OwnerWorker, "w2", known2, func(w *domain.Worker) (domain.Event, error) {
		return w.Heartbeat("j1", 0)
	})
	if err != nil || w.Version() != 2 {
		t.Fatalf("a heartbeat from a state before the trim: version %d: %v", w.Version(), err)
	}
}
