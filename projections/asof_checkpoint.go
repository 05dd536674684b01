package projections

// as_of folds that start at a checkpoint of the live log instead of
// position 0 (docs/archive.md, "Everything still answers"): so an
// as_of after the live log's start answers without an archive, and any
// as_of past a checkpoint costs the fold from it, not from the beginning.

import (
	"context"
	"errors"
	"slices"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// checkpointAsOf returns a checkpoint of store's live log that a fold up
// to cut may start from: at C ≥ the live log's start, C-1 within the cut
// (for a time cut: the event at C-1, or at C when C-1 is not in the live
// log any more, committed at or before the cut's time), that reads (one
// that does not, ErrSnapshotMismatch, is passed over) and that use
// accepts: the newest such, or with oldest the oldest. ok is false when
// there is none.
func checkpointAsOf(ctx context.Context, store eventstore.Store, cut Cut, oldest bool, use func(*StateSnapshot) bool) (sn *StateSnapshot, ok bool, err error) {
	first := uint64(0)
	if t, isTrimmer := store.(eventstore.Trimmer); isTrimmer {
		if first, _, err = t.Start(ctx); err != nil {
			return nil, false, err
		}
	}
	ms, err := CheckpointMarkers(ctx, store)
	if err != nil {
		return nil, false, err
	}
	if !oldest {
		slices.Reverse(ms)
	}
	for _, m := range ms {
		c := m.Position
		if c < first {
			continue
		}
		if within, err := checkpointWithin(ctx, store, c, first, cut); err != nil {
			return nil, false, err
		} else if !within {
			continue
		}
		sn, err := ReadCheckpoint(ctx, store, m.CheckpointWritten)
		if errors.Is(err, ErrSnapshotMismatch) {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		if use(sn) {
			return sn, true, nil
		}
	}
	return nil, false, nil
}

// checkpointWithin reports whether every event before position c (the
// live log starting at first ≤ c) is within cut.
func checkpointWithin(ctx context.Context, store eventstore.Store, c, first uint64, cut Cut) (bool, error) {
	if c == 0 {
		return true, nil
	}
	if !cut.ByTime {
		return c-1 <= cut.Position, nil
	}
	at := c - 1
	if at < first {
		at = c // (the log's time does not go back: the events before c are no later than c's)
	}
	evs, err := store.ReadAll(ctx, at, 1)
	if err != nil || len(evs) == 0 || evs[0].Position != at {
		return false, err
	}
	return cut.Includes(&evs[0]), nil
}

// viewsAsOf folds the log up to cut into new Views: from the newest
// checkpoint of live it may start from (checkpointAsOf) whose statistics
// count from position 0 (one of a build that kept none is passed over), and
// the events of past after it; else from position 0 of past (ViewsAsOf).
// past is live, or archive + live log.
func viewsAsOf(ctx context.Context, live, past eventstore.Store, cut Cut) (*Views, error) {
	sn, ok, err := checkpointAsOf(ctx, live, cut, false, func(sn *StateSnapshot) bool { return sn.statsFrom() == 0 })
	if err != nil {
		return nil, err
	}
	if !ok {
		return ViewsAsOf(ctx, past, cut)
	}
	v := viewsFromCheckpoint(sn, 1) // nobody follows its changes: no ring of recent ones
	return v, foldUpTo(ctx, v, past, cut)
}

// foldUpTo folds the events of store from v.Next() within cut into v.
func foldUpTo(ctx context.Context, v *Views, store eventstore.Store, cut Cut) error {
	for {
		batch, err := store.ReadAll(ctx, v.Next(), 4096)
		if err != nil {
			return err
		}
		n := 0
		for n < len(batch) && cut.Includes(&batch[n]) {
			n++
		}
		if n > 0 {
			if err := v.Apply(batch[:n]); err != nil {
				return err
			}
		}
		if n < len(batch) || len(batch) == 0 {
			return nil
		}
	}
}

// executionAsOfTrimmed is ExecutionAsOf on a live log that starts at first
// > 0, with no archive. An execution whose stream begins in the live log
// folds it from version 0. One whose stream began before (it was live when
// the log before it was archived) starts from its state at the oldest
// checkpoint of the live log within cut (its position then is the
// checkpoint's C-1: its last event before C may be archived) and folds its
// events from C on. A cut that no checkpoint of the live log is within
// (before the live log's start) is ErrArchived, naming the live log's
// start, unless the execution's stream begins in the live log (it had not
// been requested by then); an execution the live log does not hold is not
// found (if it ended before the live log's start, the archive knows it).
func executionAsOfTrimmed(ctx context.Context, store eventstore.Store, id string, cut Cut, first uint64) (view ExecutionView, found bool, err error) {
	archived := func() error {
		from := uint64(0)
		if !cut.ByTime {
			from = cut.Position
		}
		return &classified{err: &eventstore.TrimmedError{From: min(from, first), First: first}, kind: ErrArchived}
	}
	head, err := store.ReadStream(ctx, domain.ExecutionStream(id), 0, 1)
	if err != nil && !errors.Is(err, eventstore.ErrStreamNotFound) {
		return ExecutionView{}, false, err
	}
	if len(head) > 0 && head[0].Version == 0 {
		return ExecutionAsOf(ctx, store, id, cut)
	}
	var x *domain.Execution
	sn, ok, err := checkpointAsOf(ctx, store, cut, true, func(sn *StateSnapshot) bool {
		if len(head) == 0 {
			return true // (any: the cut is within the live log)
		}
		x = RestoreState(sn).Execution(id)
		return x != nil
	})
	switch {
	case err != nil:
		return ExecutionView{}, false, err
	case !ok:
		return ExecutionView{}, false, archived()
	case len(head) == 0:
		return ExecutionView{}, false, nil
	}
	return foldExecution(ctx, store, x, uint64(x.Version()+1), sn.Next-1, cut)
}
