// Checkpoints in the log (Config.CheckpointEvery; docs/checkpoints.md):
// the active executor, caught up, writes its fold at position C into the
// log (projections.WriteCheckpoint: checkpoint.part events, then
// checkpoint.written) once the newest event it folded is CheckpointEvery of
// log time younger than the last checkpoint's marker, and never while
// nothing but that marker happened since. At Start it resumes from the
// newest of its snapshot file and the newest checkpoint of the live log
// (needed once the log before it was trimmed).

package executor

import (
	"context"
	"errors"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/crashpoint"
)

// checkpoints is the executor's bookkeeping of checkpoints (loop only, but
// for writing, which the loop sets and a writer goroutine clears).
type checkpoints struct {
	markerAt   uint64    // position of the newest checkpoint.written folded (+1; 0: none)
	markerTime time.Time // its log time
	firstTime  time.Time // log time of the first event folded (the first checkpoint counts from it)
	lastTime   time.Time // log time of the newest event folded
	lastHash   domain.Hash
	writing    chan struct{} // closed when the write under way ends; nil: none
	wrote      bool          // set by the writer before it closes writing: the marker is in the log
	launchedAt uint64        // markerAt when the write under way began
	awaiting   bool          // a marker was written and the fold has not folded it yet
}

// noteCheckpoint records what the checkpoint rule needs of a folded event.
func (e *Executor) noteCheckpoint(env *domain.Envelope) {
	if env.Type == domain.TypeCheckpointWritten && env.Stream == domain.CheckpointMarkers {
		e.cp.markerAt, e.cp.markerTime = env.Position+1, env.Time
	}
}

// checkpointDue reports whether a checkpoint of the fold should be written now.
func (e *Executor) checkpointDue() bool {
	if e.cfg.CheckpointEvery <= 0 || e.state.Next == 0 || e.cp.writing != nil {
		return false
	}
	if e.cp.awaiting && e.cp.markerAt == e.cp.launchedAt {
		return false // the marker just written is not folded yet: it is the newest checkpoint
	}
	e.cp.awaiting = false
	if e.cp.markerAt == e.state.Next {
		return false // nothing happened since the last checkpoint
	}
	since := e.cp.markerTime
	if e.cp.markerAt == 0 {
		since = e.cp.firstTime
	}
	return e.cp.lastTime.Sub(since) >= e.cfg.CheckpointEvery
}

// writeCheckpoint writes the fold as it is now into the log, in the
// background (one at a time).
func (e *Executor) writeCheckpoint(ctx context.Context) {
	e.mu.Lock()
	sn, prev := e.state.Snapshot(), e.cp.lastHash
	e.mu.Unlock()
	done := make(chan struct{})
	e.cp.writing, e.cp.wrote, e.cp.launchedAt = done, false, e.cp.markerAt
	e.checkpointing.Add(1)
	go func() {
		defer e.checkpointing.Done()
		defer close(done)
		start := time.Now()
		m, err := projections.WriteCheckpoint(ctx, e.cfg.Store, sn, prev, e.cfg.Name, func() { crashpoint.Hit(crashpoint.CheckpointParts) })
		switch {
		case err != nil && ctx.Err() == nil:
			e.log.Warn("cannot write a checkpoint", "position", sn.Next, "err", err)
		case err == nil:
			e.cp.wrote = true // read by the loop after done is closed
			e.Stats.Checkpoints.Add(1)
			e.log.Info("wrote a checkpoint", "position", m.Position, "parts", m.Parts, "bytes", m.Bytes, "live", m.Live, "took", time.Since(start))
		}
	}()
}

// checkpointSettled is called by the loop: it clears a finished write.
func (e *Executor) checkpointSettled() {
	if e.cp.writing == nil {
		return
	}
	select {
	case <-e.cp.writing:
		e.cp.writing, e.cp.awaiting = nil, e.cp.wrote
	default:
	}
}

// loadCheckpoint replaces the fold with the newest checkpoint of the live
// log when it is newer than the fold (from a snapshot file, or empty), or
// when the live log no longer holds the fold's next position.
func (e *Executor) loadCheckpoint(ctx context.Context) {
	first := uint64(0)
	if t, ok := e.cfg.Store.(eventstore.Trimmer); ok {
		f, _, err := t.Start(ctx)
		if err != nil {
			e.log.Warn("cannot read where the live log starts", "err", err)
		}
		first = f
	}
	if e.cfg.CheckpointEvery <= 0 && e.state.Next >= first {
		return // no checkpoints are written here, and none is needed
	}
	ms, err := projections.CheckpointMarkers(ctx, e.cfg.Store)
	if err != nil {
		e.log.Warn("cannot read the log's checkpoints", "err", err)
		return
	}
	if n := len(ms); n > 0 && ms[n-1].At < e.state.Next { // folded already: the next one is due from its time
		e.cp.markerAt, e.cp.markerTime = ms[n-1].At+1, ms[n-1].Time
	}
	start := time.Now()
	sn, m, ok, err := projections.LatestCheckpoint(ctx, e.cfg.Store, max(e.state.Next+1, first), func(m domain.CheckpointWritten, err error) {
		e.log.Warn("not using a checkpoint", "position", m.Position, "err", err)
	})
	switch {
	case err != nil:
		e.log.Warn("cannot read the log's checkpoints", "err", err)
	case ok && !sn.StatsKept && first == 0:
		e.log.Info("not using a checkpoint of a build that kept no statistics: the log is whole", "position", sn.Next)
	case ok:
		e.state = projections.RestoreState(sn)
		e.snapshotAt = 0 // a snapshot file of it is due
		e.cp.markerAt, e.cp.markerTime = m.At+1, m.Time
		e.log.Info("resumed from a checkpoint in the log", "position", sn.Next, "live", m.Live, "took", time.Since(start))
	}
	if e.state.Next < first {
		e.log.Error("the live log starts after the fold, and no checkpoint there can be read: the executor cannot follow it",
			"fold", e.state.Next, "live_log_start", first, "err", errors.New("no usable checkpoint"))
	}
}

// liveStart returns the live log's first position (0 when it cannot say).
func (e *Executor) liveStart(ctx context.Context) uint64 {
	if t, ok := e.cfg.Store.(eventstore.Trimmer); ok {
		if first, _, err := t.Start(ctx); err == nil {
			return first
		}
	}
	return 0
}

// Restore replaces the fold of an executor that has not started (nor
// folded anything) with sn, a checkpoint's or a snapshot's state: a driver
// that steps the executor itself (Fold, Decide, Commit) on a trimmed log
// starts it there, as Start does on its own.
func (e *Executor) Restore(sn *projections.StateSnapshot) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.state = projections.RestoreState(sn)
	e.position.Store(e.state.Next)
}
