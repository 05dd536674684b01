package executor_test

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/runner"
)

// TestCheckpointsInTheLog: the active executor writes a checkpoint of its
// fold into the log once CheckpointEvery of log time has passed since the
// first event it folded, none while the log is idle, the next one once
// CheckpointEvery of log time has passed with something in it; a
// new executor resumes from the newest one with the fold a whole fold of
// the log gives, and carries on: every execution ends, the audit is clean.
func TestCheckpointsInTheLog(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		ctx := context.Background()
		h := newHarness(t, harnessConfig{single: single, checkpointEvery: time.Minute})
		g := newGate()
		h.define(domain.Policy{Ref: "a", Runner: "test.gate", MaxConcurrent: 1})
		h.addWorker("w1", 1, time.Hour, map[string]runner.Runner{"test.gate": g})
		ids := []string{h.request("a", ""), h.request("a", ""), h.request("a", "")}
		h.waitFor("the first run", func() bool { return g.Waiting() == 1 })
		h.quiesce()
		if n := h.exec.Stats.Checkpoints.Load(); n != 0 {
			t.Fatalf("%d checkpoints within the first minute of log time", n)
		}
		h.advance(2 * time.Minute)
		ids = append(ids, h.request("a", ""))
		h.waitFor("a first checkpoint", func() bool { return h.exec.Stats.Checkpoints.Load() == 1 })
		h.quiesce()
		h.advance(5 * time.Minute) // idle: nothing but the checkpoint since it
		h.quiesce()
		if n := h.exec.Stats.Checkpoints.Load(); n != 1 {
			t.Fatalf("%d checkpoints after an idle while, want 1", n)
		}
		ids = append(ids, h.request("a", "")) // 5 min of log time after the first
		h.waitFor("a second checkpoint", func() bool { return h.exec.Stats.Checkpoints.Load() == 2 })
		h.quiesce()
		ms, err := projections.CheckpointMarkers(ctx, h.store)
		if err != nil || len(ms) != 2 {
			t.Fatalf("%d markers: %v", len(ms), err)
		}
		m := ms[1]
		for _, s := range []string{domain.ActionStream("a"), domain.QueueStream("a"), domain.WorkerStream("w1"), domain.CheckpointMarkers} {
			if !slices.Contains(m.Keep, s) {
				t.Errorf("keep %v lacks %s", m.Keep, s)
			}
		}
		if m.Live != 5 {
			t.Errorf("%d live executions in the checkpoint, want 5", m.Live)
		}

		h.exec.Stop()
		h.exec = nil
		// The executor now sees a live log that starts at the checkpoint.
		h.cfg.execStore = func(s eventstore.Store) eventstore.Store { return &startsAt{Store: s, first: m.Position} }
		h.startExecutor()
		if recs := h.logs.find("resumed from a checkpoint in the log", "position", m.Position); len(recs) != 1 {
			t.Fatalf("the restarted executor did not resume from the checkpoint at %d (%d log lines)", m.Position, len(recs))
		}
		h.settle()
		whole := projections.NewState()
		evs, err := h.store.ReadAll(ctx, 0, 100_000)
		if err != nil {
			t.Fatal(err)
		}
		for i := range evs {
			if err := whole.Apply(&evs[i]); err != nil {
				t.Fatal(err)
			}
		}
		var resumed *projections.StateSnapshot
		h.exec.Inspect(func(s *projections.State) { resumed = s.Snapshot() })
		if !bytes.Equal(gobOf(t, resumed), gobOf(t, whole.Snapshot())) {
			t.Fatal("the fold resumed from the checkpoint differs from a whole fold of the log")
		}
		for range ids {
			h.waitFor("a run", func() bool { return g.Waiting() == 1 })
			g.ReleaseAll()
		}
		for _, id := range ids {
			h.waitStatus(id, domain.StatusCompleted)
		}
		if rep := h.auditClean(); rep.Ended != len(ids) {
			t.Fatalf("audit: %d ended, want %d", rep.Ended, len(ids))
		}
	})
}

// startsAt is a log whose live part starts at first: reads below it fail
// with eventstore.ErrTrimmed, as after a Trim.
type startsAt struct {
	eventstore.Store
	first uint64
}

func (s *startsAt) AtomicMultiStream() bool { return eventstore.AtomicMultiStream(s.Store) }

func (s *startsAt) Trim(context.Context, uint64, []string) error { return errors.ErrUnsupported }

func (s *startsAt) Start(context.Context) (uint64, domain.Hash, error) {
	return s.first, domain.Hash{}, nil
}

func (s *startsAt) ReadAll(ctx context.Context, from uint64, limit int) ([]domain.Envelope, error) {
	if from < s.first {
		return nil, &eventstore.TrimmedError{From: from, First: s.first}
	}
	return s.Store.ReadAll(ctx, from, limit)
}

func (s *startsAt) Subscribe(ctx context.Context, from uint64, f eventstore.Filter, handle func([]domain.Envelope) error) error {
	if from < s.first {
		return &eventstore.TrimmedError{From: from, First: s.first}
	}
	return s.Store.Subscribe(ctx, from, f, handle)
}

func gobOf(t *testing.T, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestOneCheckpointPerInterval: a checkpoint whose marker reaches the fold
// late (a slow subscription) is still the newest one; the executor does not
// write another at every tick until it has folded it.
func TestOneCheckpointPerInterval(t *testing.T) {
	h := newHarness(t, harnessConfig{checkpointEvery: time.Minute,
		execStore: func(s eventstore.Store) eventstore.Store { return &lateMarkers{Store: s} }})
	g := newGate()
	h.define(domain.Policy{Ref: "a", Runner: "test.gate", MaxConcurrent: 1})
	h.addWorker("w1", 1, time.Hour, map[string]runner.Runner{"test.gate": g})
	h.request("a", "")
	h.waitFor("the first run", func() bool { return g.Waiting() == 1 })
	h.quiesce()
	h.advance(2 * time.Minute)
	h.request("a", "")
	h.waitFor("a first checkpoint", func() bool { return h.exec.Stats.Checkpoints.Load() >= 1 })
	h.quiesce()
	if n := h.exec.Stats.Checkpoints.Load(); n != 1 {
		t.Fatalf("%d checkpoints for one interval of log time, want 1", n)
	}
	g.ReleaseAll()
}

// lateMarkers delivers a batch holding a checkpoint marker 200 ms late,
// some forty executor ticks.
type lateMarkers struct{ eventstore.Store }

func (s *lateMarkers) AtomicMultiStream() bool { return eventstore.AtomicMultiStream(s.Store) }

func (s *lateMarkers) Subscribe(ctx context.Context, from uint64, filter eventstore.Filter, handle func([]domain.Envelope) error) error {
	return s.Store.Subscribe(ctx, from, filter, func(b []domain.Envelope) error {
		for i := range b {
			if b[i].Type == domain.TypeCheckpointWritten {
				time.Sleep(200 * time.Millisecond)
				break
			}
		}
		return handle(b)
	})
}
