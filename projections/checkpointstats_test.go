package projections_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
)

// TestCheckpointCarriesStatistics: a read model started from a checkpoint
// in the log at any position of two logs (ended executions before it, with
// every kind of end) and fed the rest shows every action's queue_stats
// (totals, wait percentiles, position) exactly as a fold from position 0.
func TestCheckpointCarriesStatistics(t *testing.T) {
	atEveryCut(t, func(t *testing.T, store *memstore.Store, src []domain.Envelope, cut int, st *projections.State) {
		ctx := context.Background()
		if _, err := projections.WriteCheckpoint(ctx, store, st.Snapshot(), domain.Hash{}, "executor", nil); err != nil {
			t.Fatal(err)
		}
		copyLog(t, store, src[cut:])
		sn, _, ok, err := projections.LatestCheckpoint(ctx, store, 0, nil)
		if err != nil || !ok {
			t.Fatalf("cut %d: latest checkpoint: %v %v", cut, ok, err)
		}
		if !sn.StatsKept || sn.StatsFrom != 0 {
			t.Fatalf("cut %d: the checkpoint's statistics: kept %v, from %d", cut, sn.StatsKept, sn.StatsFrom)
		}
		resumed := projections.ViewsFromCheckpoint(sn)
		if err := resumed.CatchUp(ctx, store); err != nil {
			t.Fatal(err)
		}
		whole := projections.NewViews()
		if err := whole.CatchUp(ctx, store); err != nil {
			t.Fatal(err)
		}
		got, want := jsonOf(t, resumed.AllStats()), jsonOf(t, whole.AllStats())
		if !bytes.Equal(got, want) {
			t.Fatalf("cut %d: queue_stats from the checkpoint\n%s\nfrom position 0\n%s", cut, got, want)
		}
		if cut == len(src) && !bytes.Contains(want, []byte(`"total_completed":1`)) {
			t.Fatalf("the log ends no execution: %s", want) // (the test would prove nothing)
		}
	})
}

func jsonOf(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOlderCheckpointsStillRead: a checkpoint and a read model snapshot
// written by the build before the statistics were kept in the fold's state
// (testdata, written by commit 81883d5) still decode: the checkpoint with
// no statistics, counted from its position on; the read model's snapshot
// with the statistics the read model had then.
func TestOlderCheckpointsStillRead(t *testing.T) {
	t.Parallel()
	content, err := os.ReadFile("testdata/checkpoint-format4-without-statistics.bin")
	if err != nil {
		t.Fatal(err)
	}
	sn, err := projections.DecodeCheckpoint(content)
	if err != nil {
		t.Fatalf("an older build's checkpoint: %v", err)
	}
	if sn.Next != 30 || sn.StatsKept || len(sn.Stats) != 0 || len(sn.Actions) != 2 {
		t.Fatalf("decoded: next %d, stats kept %v, %d stats, %d actions", sn.Next, sn.StatsKept, len(sn.Stats), len(sn.Actions))
	}
	if from := projections.RestoreState(sn).StatsFrom(); from != 30 {
		t.Fatalf("its statistics count from %d, want 30", from)
	}
	if from := projections.RestoreState(projections.RestoreState(sn).Snapshot()).StatsFrom(); from != 30 {
		t.Fatalf("a checkpoint of a fold resumed from it counts its statistics from %d, want 30", from)
	}
	v := projections.ViewsFromCheckpoint(sn)
	if s, ok := v.Stats("a"); !ok || s.TotalEnqueued != 0 || s.QueueLength != 2 {
		t.Fatalf("the read model of it: %+v %v", s, ok)
	}

	var vs projections.ViewsSnapshot
	if _, ok, err := (projections.SnapshotFiles{Dir: "testdata"}).Read("views-format4-legacy", &vs); err != nil || !ok {
		t.Fatalf("an older build's read model snapshot: %v %v", ok, err)
	}
	want, err := os.ReadFile("testdata/views-format4-legacy.stats.json")
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	_ = json.Unmarshal(want, &a)
	_ = json.Unmarshal(jsonOf(t, projections.RestoreViews(&vs).AllStats()), &b)
	if got, want := jsonOf(t, b), jsonOf(t, a); !bytes.Equal(got, want) {
		t.Fatalf("restored queue_stats\n%s\nwant (as that build saved them)\n%s", got, want)
	}
}
