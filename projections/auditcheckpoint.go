package projections

// The audit's checkpoint rule (RuleCheckpoint): a checkpoint in the log
// (domain.CheckpointWritten, owner executor) is the fold of the log before
// its position. The audit folds a State beside its own checks and, at each
// position C that a checkpoint.written of the log names, reads the
// checkpoint (its bytes must have the size and SHA-256 the marker names),
// compares its state with the fold's, and the chain hash the marker names
// with the hash of the event at C-1 (when the store keeps the chain). A checkpoint at C is checked whatever the audit
// reads after C: so a history that starts at a checkpoint (the live log
// alone) is judged from a fold that can be trusted.

import (
	"bytes"
	"context"
	"fmt"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// RuleCheckpoint: a checkpoint is not the fold of the log before it.
const RuleCheckpoint = "checkpoint"

// auditCheckpoints checks the log's checkpoints against a fold of it.
type auditCheckpoints struct {
	ctx   context.Context
	store eventstore.Store
	st    *State
	at    map[uint64][]Checkpoint // by position C
	last  uint64                  // the newest C: the fold stops there
	prev  domain.Hash             // hash of the event folded last
	added func(v Violation)
}

// newAuditCheckpoints reads the checkpoints of store (none: nil, which
// checks nothing).
func newAuditCheckpoints(ctx context.Context, store eventstore.Store, add func(v Violation)) (*auditCheckpoints, error) {
	cps, err := CheckpointMarkers(ctx, store)
	if err != nil || len(cps) == 0 {
		return nil, err
	}
	a := &auditCheckpoints{ctx: ctx, store: store, st: NewState(), at: map[uint64][]Checkpoint{}, added: add}
	for _, cp := range cps {
		a.at[cp.Position] = append(a.at[cp.Position], cp)
		a.last = max(a.last, cp.Position)
	}
	return a, nil
}

// startAt makes the fold start at a checkpoint's state (an audit of the
// live log alone, from its start).
func (a *auditCheckpoints) startAt(sn *StateSnapshot, prev domain.Hash) {
	a.st, a.prev = RestoreState(sn), prev
}

// step checks the checkpoints at env's position, then folds env.
func (a *auditCheckpoints) step(env *domain.Envelope) {
	if a == nil || env.Position > a.last {
		return
	}
	a.check(env.Position)
	_ = a.st.Apply(env) // (an event that does not decode is the decode rule's)
	a.prev = env.Hash
}

// end checks the checkpoints at the position after the last event read.
func (a *auditCheckpoints) end(next uint64) {
	if a != nil && next <= a.last {
		a.check(next)
	}
}

func (a *auditCheckpoints) check(pos uint64) {
	cps := a.at[pos]
	if len(cps) == 0 || a.st.Next != pos {
		return // none here, or the fold does not reach it (it started later)
	}
	fold := a.st.Snapshot()
	content, err := EncodeCheckpoint(fold)
	for _, cp := range cps {
		var detail string
		// The checkpoint's bytes are checked against its marker (size,
		// SHA-256) as it is read; its state is then encoded here, as the
		// fold is: gob's type ids are a process's own, so bytes written by
		// another process are compared through their decoding.
		sn, rerr := ReadCheckpoint(a.ctx, a.store, cp.CheckpointWritten)
		var theirs []byte
		if rerr == nil {
			theirs, rerr = EncodeCheckpoint(sn)
		}
		ours, oerr, cmp := content, err, fold
		if rerr == nil && err == nil && sn.statsFrom() != fold.StatsFrom {
			// Statistics counted from another position (a checkpoint of
			// a build that kept none, or of a fold that resumed from
			// one) cannot be compared with the fold's: the rest is.
			other := *fold
			other.Stats, other.StatsFrom, other.StatsKept = sn.Stats, sn.StatsFrom, sn.StatsKept
			ours, oerr = EncodeCheckpoint(&other)
			cmp = &other
		}
		switch {
		case oerr != nil:
			detail = oerr.Error()
		case rerr != nil:
			detail = fmt.Sprintf("checkpoint at %d cannot be read: %v", pos, rerr)
		case !bytes.Equal(theirs, ours):
			detail = fmt.Sprintf("checkpoint at %d is not the fold of the log before it; first difference (checkpoint, fold): %s", pos, diffSnapshots(sn, cmp))
		case cp.Prev != a.prev && !(cp.Prev.IsZero() || a.prev.IsZero()):
			detail = fmt.Sprintf("checkpoint at %d names chain hash %s before it; the event at %d has %s", pos, cp.Prev, pos-1, a.prev)
		}
		if detail != "" {
			a.added(Violation{Position: cp.At, Stream: domain.CheckpointMarkers, Type: domain.TypeCheckpointWritten, Rule: RuleCheckpoint, Detail: detail})
		}
	}
	delete(a.at, pos)
}
