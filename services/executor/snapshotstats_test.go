package executor_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/turnstile/turnstile/internal/waitfor"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/executor"
)

// TestSnapshotWithoutStatisticsIsRefolded: on a whole log (not trimmed), an
// executor does not resume from a snapshot of a build that kept no
// statistics in the fold (it folds the log from the beginning), so the
// checkpoints it writes carry the statistics of the whole log; one of this
// build it resumes from.
func TestSnapshotWithoutStatisticsIsRefolded(t *testing.T) {
	ctx := context.Background()
	store, snaps, cmds, start := snapshotting(ctx, t)
	stats := func(e *executor.Executor) (from uint64, sn *projections.StateSnapshot) {
		var head uint64
		waitfor.That(t, "the executor to fold the log with a rejection counted", func() bool {
			head, _ = store.Head(ctx)
			e.Inspect(func(s *projections.State) { from, sn = s.StatsFrom(), s.Snapshot() })
			return sn.Next == head && len(sn.Stats) > 0 && sn.Stats[0].Rejected > 0
		}, waitfor.Note(func() string {
			return fmt.Sprintf("the executor's fold is at %d of %d with statistics %+v", sn.Next, head, sn.Stats)
		}))
		return from, sn
	}
	e := start()
	requestOne(t, cmds, "nobody.defined") // rejected: counted
	_, before := stats(e)
	e.Stop()
	// The snapshot as the build before the statistics wrote it.
	var sn projections.StateSnapshot
	info, ok, err := snaps.Read("executor-state", &sn)
	if err != nil || !ok {
		t.Fatalf("no executor snapshot after a clean stop: %v", err)
	}
	sn.Stats, sn.StatsFrom, sn.StatsKept = nil, 0, false
	if err := snaps.Save("executor-state", sn.Next, info.LastEventID, &sn); err != nil {
		t.Fatal(err)
	}
	e = start()
	from, after := stats(e)
	e.Stop()
	if from != 0 || after.Stats[0].Rejected != before.Stats[0].Rejected {
		t.Fatalf("resumed from a snapshot without statistics: they count from %d, %+v (before: %+v)", from, after.Stats, before.Stats)
	}
	e = start() // from this build's snapshot
	defer e.Stop()
	if from, again := stats(e); from != 0 || again.Stats[0].Rejected != before.Stats[0].Rejected {
		t.Fatalf("resumed from this build's snapshot: from %d, %+v", from, again.Stats)
	}
}
