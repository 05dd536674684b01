package projections_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
)

// TestCheckpointInTheLogResumesExactly writes a checkpoint of the fold at
// every position of two logs into the log itself, reads the newest back,
// folds the rest from it, and checks the result equals one fold of the
// whole log; writing the same checkpoint again is an idempotent replay.
func TestCheckpointInTheLogResumesExactly(t *testing.T) {
	atEveryCut(t, func(t *testing.T, store *memstore.Store, src []domain.Envelope, cut int, st *projections.State) {
		ctx := context.Background()
		sn := st.Snapshot()
		m, err := projections.WriteCheckpoint(ctx, store, sn, domain.Hash{}, "executor", nil)
		if err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		if m2, err := projections.WriteCheckpoint(ctx, store, sn, domain.Hash{}, "executor", nil); err != nil || m2.SHA256 != m.SHA256 {
			t.Fatalf("cut %d: writing it again: %v (%s, %s)", cut, err, m2.SHA256, m.SHA256)
		}
		copyLog(t, store, src[cut:])
		got, gm, ok, err := projections.LatestCheckpoint(ctx, store, 0, nil)
		if err != nil || !ok || gm.Position != uint64(cut) {
			t.Fatalf("cut %d: latest checkpoint: ok %v at %d: %v", cut, ok, gm.Position, err)
		}
		if !slices.Contains(gm.Keep, domain.CheckpointMarkers) || (cut > 0 && !slices.Contains(gm.Keep, domain.QueueStream("a"))) {
			t.Fatalf("cut %d: keep %v", cut, gm.Keep)
		}
		resumed := projections.RestoreState(got)
		whole := projections.NewState()
		for _, e := range readAll(t, store) {
			if err := whole.Apply(&e); err != nil {
				t.Fatal(err)
			}
			if e.Position >= resumed.Next {
				if err := resumed.Apply(&e); err != nil {
					t.Fatal(err)
				}
			}
		}
		if !bytes.Equal(gobBytes(t, resumed.Snapshot()), gobBytes(t, whole.Snapshot())) {
			t.Fatalf("cut %d: the fold resumed from the checkpoint differs from the whole fold", cut)
		}
	})
}

// atEveryCut runs check on both test logs (viewsLog, singleStreamLog) at
// every position cut of each, in parallel subtests: store holds the log's
// first cut events (each with its own time, from the store) and st is
// their fold.
func atEveryCut(t *testing.T, check func(t *testing.T, store *memstore.Store, src []domain.Envelope, cut int, st *projections.State)) {
	t.Parallel()
	for name, mk := range map[string]func(*testing.T) eventstore.Store{"atomic": viewsLog, "single-stream": singleStreamLog} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src := readAll(t, mk(t))
			for cut := 0; cut <= len(src); cut++ {
				store := memstore.New(memstore.Options{})
				copyLog(t, store, src[:cut])
				st := projections.NewState()
				for _, e := range readAll(t, store) {
					if err := st.Apply(&e); err != nil {
						t.Fatal(err)
					}
				}
				check(t, store, src, cut, st)
			}
		})
	}
}

// copyLog appends evs to store, each to its stream, keeping ids and order.
func copyLog(t *testing.T, store eventstore.Store, evs []domain.Envelope) {
	t.Helper()
	for _, e := range evs {
		e.Position, e.Version = 0, 0
		if _, err := store.Append(context.Background(), e.Stream, eventstore.Any, e); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCheckpointEncodingIsDeterministic: equal states give equal bytes, and
// a decoded checkpoint encodes to the same bytes (the audit compares them).
func TestCheckpointEncodingIsDeterministic(t *testing.T) {
	t.Parallel()
	evs := readAll(t, singleStreamLog(t))
	a, b := projections.NewState(), projections.NewState()
	for i := range evs {
		_ = a.Apply(&evs[i])
		_ = b.Apply(&evs[i])
	}
	x, err := projections.EncodeCheckpoint(a.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	y, _ := projections.EncodeCheckpoint(b.Snapshot())
	if !bytes.Equal(x, y) {
		t.Fatal("two equal folds encode differently")
	}
	sn, err := projections.DecodeCheckpoint(x)
	if err != nil {
		t.Fatal(err)
	}
	z, _ := projections.EncodeCheckpoint(projections.RestoreState(sn).Snapshot())
	if !bytes.Equal(x, z) {
		t.Fatal("a restored checkpoint encodes differently")
	}
	if _, err := projections.DecodeCheckpoint(x[:len(x)-1]); !errors.Is(err, projections.ErrSnapshotMismatch) {
		t.Fatalf("a truncated checkpoint: %v", err)
	}
}

// TestCheckpointInPartsIsCheckedBeforeUse: a large checkpoint is split in
// parts of at most domain.MaxCheckpointPart bytes of JSON; a part that is
// missing or changed makes it unreadable, and LatestCheckpoint falls back
// to the one before.
func TestCheckpointInPartsIsCheckedBeforeUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	w := logWriter{t: t, store: store}
	w.action("a", 1)
	st := projections.NewState()
	fold := func() {
		for _, e := range readAll(t, store) {
			_ = st.Apply(&e)
		}
	}
	fold()
	first, err := projections.WriteCheckpoint(ctx, store, st.Snapshot(), domain.Hash{}, "executor", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20_000 {
		w.request(fmt.Sprintf("x%05d-%s", i, bytes.Repeat([]byte("y"), 40)), "a")
	}
	fold()
	big, err := projections.WriteCheckpoint(ctx, store, st.Snapshot(), domain.Hash{}, "executor", nil)
	if err != nil {
		t.Fatal(err)
	}
	if big.Parts < 2 {
		t.Fatalf("%d bytes in %d part(s)", big.Bytes, big.Parts)
	}
	parts, err := store.ReadStream(ctx, domain.CheckpointStream(big.Position), 0, 1000)
	if err != nil || len(parts) != big.Parts {
		t.Fatalf("%d parts in the stream, %d named: %v", len(parts), big.Parts, err)
	}
	for _, p := range parts {
		if len(p.Data) > domain.MaxCheckpointPart {
			t.Fatalf("a part of %d bytes", len(p.Data))
		}
	}
	if big.Live != 20_000 {
		t.Fatalf("live %d", big.Live)
	}
	if n := len(projections.LiveStreams(mustRead(t, store, big))); n != 20_000 {
		t.Fatalf("%d live streams", n)
	}
	// A marker naming other content: passed over, the one before is used.
	bad := big
	bad.SHA256 = first.SHA256
	if _, err := projections.ReadCheckpoint(ctx, store, bad); !errors.Is(err, projections.ErrSnapshotMismatch) {
		t.Fatalf("a marker with another sha256: %v", err)
	}
	w.put(domain.CheckpointMarkers, domain.OwnerExecutor, "executor", bad)
	var warned []uint64
	_, m, ok, err := projections.LatestCheckpoint(ctx, store, 0, func(m domain.CheckpointWritten, err error) { warned = append(warned, m.Position) })
	if err != nil || !ok || m.Position != big.Position || m.SHA256 != big.SHA256 || len(warned) != 1 {
		t.Fatalf("latest: ok %v at %d (%s), warned %v: %v", ok, m.Position, m.SHA256, warned, err)
	}
	if _, _, ok, _ := projections.LatestCheckpoint(ctx, store, big.Position+1, nil); ok {
		t.Fatal("a checkpoint below atLeast was used")
	}
}

func mustRead(t *testing.T, store eventstore.Store, m domain.CheckpointWritten) *projections.StateSnapshot {
	t.Helper()
	sn, err := projections.ReadCheckpoint(context.Background(), store, m)
	if err != nil {
		t.Fatal(err)
	}
	return sn
}

// TestAuditChecksCheckpoints: the audit finds a checkpoint that is not the
// fold of the log before it, and one that names another chain hash before
// it; true checkpoints pass.
func TestAuditChecksCheckpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := readAll(t, viewsLog(t))
	for _, tc := range []struct {
		name string
		lie  func(evs []domain.Envelope, sn *projections.StateSnapshot, prev domain.Hash) (*projections.StateSnapshot, domain.Hash)
		rule string
	}{
		{"true", func(_ []domain.Envelope, sn *projections.StateSnapshot, prev domain.Hash) (*projections.StateSnapshot, domain.Hash) {
			return sn, prev
		}, ""},
		{"another state", func(evs []domain.Envelope, sn *projections.StateSnapshot, prev domain.Hash) (*projections.StateSnapshot, domain.Hash) {
			st := projections.RestoreState(sn)
			_ = st.Apply(&evs[sn.Next]) // one event more, claimed to be the state before it
			lie := st.Snapshot()
			lie.Next = sn.Next
			return lie, prev
		}, projections.RuleCheckpoint},
		{"another chain hash", func(_ []domain.Envelope, sn *projections.StateSnapshot, prev domain.Hash) (*projections.StateSnapshot, domain.Hash) {
			prev[0] ^= 1
			return sn, prev
		}, projections.RuleCheckpoint},

		{"other statistics", func(_ []domain.Envelope, sn *projections.StateSnapshot, prev domain.Hash) (*projections.StateSnapshot, domain.Hash) {
			sn.Stats[len(sn.Stats)-1].Enqueued++
			return sn, prev
		}, projections.RuleCheckpoint},
		{"statistics of another start", func(_ []domain.Envelope, sn *projections.StateSnapshot, prev domain.Hash) (*projections.StateSnapshot, domain.Hash) {
			sn.StatsFrom = 1 // counted from elsewhere: not judged
			sn.Stats[len(sn.Stats)-1].Enqueued++
			return sn, prev
		}, ""},
		{"an older build's", func(_ []domain.Envelope, sn *projections.StateSnapshot, prev domain.Hash) (*projections.StateSnapshot, domain.Hash) {
			sn.Stats, sn.StatsKept = nil, false // no statistics: the rest is judged
			return sn, prev
		}, ""},
		{"an older build's of another state", func(evs []domain.Envelope, sn *projections.StateSnapshot, prev domain.Hash) (*projections.StateSnapshot, domain.Hash) {
			st := projections.RestoreState(sn)
			_ = st.Apply(&evs[sn.Next])
			lie := st.Snapshot()
			lie.Next, lie.Stats, lie.StatsKept = sn.Next, nil, false
			return lie, prev
		}, projections.RuleCheckpoint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := memstore.New(memstore.Options{})
			cut := len(src) / 2
			copyLog(t, store, src[:cut])
			evs := readAll(t, store)
			st := projections.NewState()
			for i := range evs {
				_ = st.Apply(&evs[i])
			}
			copyLog(t, store, src[cut:cut+1])
			evs = readAll(t, store)
			sn, prev := tc.lie(evs, st.Snapshot(), evs[cut-1].Hash)
			if _, err := projections.WriteCheckpoint(ctx, store, sn, prev, "executor", nil); err != nil {
				t.Fatal(err)
			}
			copyLog(t, store, src[cut+1:])
			rep, err := projections.Audit(ctx, store, nil)
			if err != nil {
				t.Fatal(err)
			}
			var rules []string
			for _, v := range rep.Violations {
				rules = append(rules, v.Rule)
			}
			if tc.rule == "" && len(rules) > 0 || tc.rule != "" && !slices.Equal(rules, []string{tc.rule}) {
				t.Fatalf("violations %v %+v, want [%s]", rules, rep.Violations, tc.rule)
			}
			if tc.name == "another state" && !strings.Contains(rep.Violations[0].Detail, "first difference (checkpoint, fold): ") {
				t.Fatalf("the violation does not say where: %s", rep.Violations[0].Detail)
			}
			if tc.name == "other statistics" && !strings.Contains(rep.Violations[0].Detail, "first difference (checkpoint, fold): statistics[") {
				t.Fatalf("the violation does not name the statistics: %s", rep.Violations[0].Detail)
			}
			t.Log(rep.Violations)
		})
	}
}

// TestRestoredQueueGrantsByPriority: a queue restored from a snapshot (a
// checkpoint's, a snapshot file's) grants the highest priority first, as
// the queue it was taken from does (the simulation with archiving found a
// restored queue granting in request order until it emptied).
func TestRestoredQueueGrantsByPriority(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.Options{})
	w := logWriter{t: t, store: store}
	w.action("a", 1)
	w.put(domain.ExecutionStream("low"), domain.OwnerExecutor, "", domain.ExecutionRequested{Action: "a", Priority: 4})
	w.put(domain.ExecutionStream("high"), domain.OwnerExecutor, "", domain.ExecutionRequested{Action: "a", Priority: 1})
	st := projections.NewState()
	for _, e := range readAll(t, store) {
		_ = st.Apply(&e)
	}
	now := readAll(t, store)[0].Time
	first := func(s *projections.State) string {
		ws := s.Queues.Get("a").Grantable(1, now)
		if len(ws) != 1 {
			t.Fatalf("%d grantable", len(ws))
		}
		return ws[0].Execution
	}
	if got := first(st); got != "high" {
		t.Fatalf("the fold grants %s first", got)
	}
	content, err := projections.EncodeCheckpoint(st.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	sn, err := projections.DecodeCheckpoint(content)
	if err != nil {
		t.Fatal(err)
	}
	if got := first(projections.RestoreState(sn)); got != "high" {
		t.Fatalf("the restored fold grants %s first", got)
	}
}
