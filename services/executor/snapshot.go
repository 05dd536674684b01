// Snapshots of the fold (Config.Snapshots): a restart resumes from the
// saved fold when it matches the log, else folds from the beginning; the
// loop saves one every Config.SnapshotEvery events and Stop one at the end.
// A snapshot carries the fold's partial writes, so a restarted executor
// completes them too.

package executor

import (
	"context"
	"time"

	"github.com/turnstile/turnstile/projections"
)

const snapshotName = "executor-state"

// loadSnapshot replaces the empty fold with the saved snapshot, if there is
// one that matches the log.
func (e *Executor) loadSnapshot(ctx context.Context) {
	if e.cfg.Snapshots == nil {
		return
	}
	start := time.Now()
	var sn projections.StateSnapshot
	ok, err := e.cfg.Snapshots.Load(ctx, e.cfg.Store, snapshotName, &sn)
	switch {
	case err != nil:
		e.log.Warn("not using the snapshot: folding the log from the beginning", "err", err)
	case ok && !sn.StatsKept && e.liveStart(ctx) == 0:
		// A build before the statistics were in the fold: its checkpoints
		// would count them from here on; the whole log still says them all.
		e.log.Info("not using the snapshot of a build that kept no statistics: folding the log from the beginning", "position", sn.Next)
	case ok:
		e.state = projections.RestoreState(&sn)
		e.snapshotAt = sn.Next
		e.log.Info("resumed from a snapshot", "position", sn.Next, "live", len(sn.Executions), "took", time.Since(start))
	}
}

// saveSnapshot saves the fold as it is now; the encoding and the write run
// in the background (the snapshot shares nothing that the fold changes).
func (e *Executor) saveSnapshot() {
	if e.cfg.Snapshots == nil || e.lastID == "" {
		return
	}
	e.mu.Lock()
	sn, lastID := e.state.Snapshot(), e.lastID
	e.mu.Unlock()
	e.snapshotAt = sn.Next
	e.snapshots.Add(1)
	e.saving.Store(true)
	go func() {
		defer e.snapshots.Done()
		defer e.saving.Store(false)
		start := time.Now()
		if err := e.cfg.Snapshots.Save(snapshotName, sn.Next, lastID, sn); err != nil {
			e.log.Warn("cannot save a snapshot", "err", err)
			return
		}
		e.log.Debug("saved a snapshot", "position", sn.Next, "took", time.Since(start))
	}()
}
