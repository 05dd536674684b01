package projections

// An audit of the live log alone once the log before it was archived
// (docs/checkpoints.md, "The audit"): it starts from a
// checkpoint's state instead of position 0, judges every event from the
// checkpoint on by every rule whose state the checkpoint holds, checks the
// hash chain from the live log's start, and says what it could not judge.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// AuditStart says where an audit of a trimmed live log started and what it
// could not judge.
type AuditStart struct {
	LiveStart  uint64 `json:"live_start"` // the live log's first position
	Checkpoint uint64 `json:"checkpoint"` // C: the rules judge the events from C on, on the checkpoint's state
	Marker     uint64 `json:"marker"`     // the position of the checkpoint's checkpoint.written
	// NotJudged lists what the audit could not judge from C, one item
	// each (`turnstile audit --archive` judges it all).
	NotJudged []string `json:"not_judged"`
	// Unjudged counts the grants from C on of executions not live at C
	// nor requested since: void grants of executions that ended before C
	// (a race the executor may lose on a store without atomic
	// multi-stream appends), or grants of executions never requested.
	Unjudged int `json:"unjudged_grants"`
}

// ErrNoCheckpointToAudit says the live log starts after position 0 and holds
// no checkpoint at or after its start that reads: only an audit with the
// archive can judge it.
var ErrNoCheckpointToAudit = errors.New("the live log starts after position 0 and holds no readable checkpoint at or after its start")

// AuditLive audits store's live log. When the log before its start was
// archived (eventstore.Trimmer: the live log starts at S > 0), the audit
// starts at the oldest checkpoint at C ≥ S that reads (the one that leaves
// the fewest events unjudged; the archiver trims at a checkpoint, so
// normally C = S): its state stands for the log before C. Every event from
// S on is checked by the hash chain, from the chain hash the store names
// before S; every event from C on is judged by every rule, as Audit judges
// it, but for what AuditStart.NotJudged lists; every later checkpoint is
// compared with the fold from C (RuleCheckpoint), and the marker's prev
// with the hash of the event at C-1. The report's From says so. Otherwise
// AuditLive is Audit. Without a usable checkpoint it fails with
// ErrNoCheckpointToAudit.
func AuditLive(ctx context.Context, store eventstore.Store, progress func(pos uint64)) (*AuditReport, error) {
	t, ok := store.(eventstore.Trimmer)
	if !ok {
		return Audit(ctx, store, progress)
	}
	first, prev, err := t.Start(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit: the live log's start: %w", err)
	}
	if first == 0 {
		return Audit(ctx, store, progress)
	}
	ms, err := CheckpointMarkers(ctx, store)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	var unread []string
	for _, m := range ms {
		if m.Position < first {
			continue
		}
		sn, err := ReadCheckpoint(ctx, store, m.CheckpointWritten)
		if errors.Is(err, ErrSnapshotMismatch) {
			unread = append(unread, fmt.Sprintf("the checkpoint at %d does not read (%v): the audit starts at a later one", m.Position, err))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		base := &auditBase{sn: sn, first: first, prev: prev, start: AuditStart{LiveStart: first, Checkpoint: m.Position, Marker: m.At}}
		base.start.NotJudged = base.notJudged(ms, unread)
		return audit(ctx, store, base, progress)
	}
	return nil, fmt.Errorf("audit: %w (live log from %d): audit with --archive", ErrNoCheckpointToAudit, first)
}

// auditBase is where an audit of the live log starts: the checkpoint's
// state sn (at C = sn.Next), the live log's first position and the chain
// hash before it.
type auditBase struct {
	sn    *StateSnapshot
	first uint64
	prev  domain.Hash
	start AuditStart
}

// notJudged lists what an audit from the checkpoint cannot judge.
func (b *auditBase) notJudged(ms []Checkpoint, unread []string) []string {
	c := b.sn.Next
	out := []string{fmt.Sprintf("the events before position %d (the live log starts at %d): every rule; their state is the checkpoint's", c, b.first)}
	if c > b.first {
		out = append(out, fmt.Sprintf("the events from %d to %d: the hash chain only", b.first, c-1))
	}
	out = append(out, unread...)
	for _, m := range ms {
		if m.Position < b.first {
			out = append(out, fmt.Sprintf("checkpoints before the live log's start (the first at %d): their parts were archived", m.Position))
			break
		}
	}
	if b.sn.statsFrom() > 0 {
		out = append(out, fmt.Sprintf("the actions' statistics in checkpoints: the checkpoint's count from %d", b.sn.statsFrom()))
	}
	return append(out,
		fmt.Sprintf("principal: cancellation requests for executions requested before %d (who requested them is not in the checkpoint)", c),
		fmt.Sprintf("schedule_tick: a tick requested before %d and again after it", c),
		fmt.Sprintf("cancel_in_progress: the executor's cancellations of executions granted before %d", c),
		fmt.Sprintf("lease: writes for an incarnation declared lost before %d and since registered anew (the handoff rule still judges the execution)", c),
		fmt.Sprintf("grant: grants of executions not live at %d nor requested since (void, or of no execution; counted in unjudged_grants)", c),
		fmt.Sprintf("the rule an event for an execution not live at %d breaks: 'terminal' if it ended before %d, else 'transition' (it is reported, with that said)", c, c),
		fmt.Sprintf("the report's executions and grants: those live at %d or requested after it", c),
	)
}

// seed sets the audit's state to the checkpoint's: the live executions,
// their queues and grants, the with_items parents, the workers (their
// current incarnations, the runners they registered, the lost ones, the
// debts and held executions of the lease rule), and marks what the
// principal and cancel_in_progress rules cannot judge. It returns the
// queues.
func (b *auditBase) seed(execs map[string]*domain.Execution, granted map[string]bool, fans map[string]*auditFanout,
	lost, serves map[string]map[string]bool, who *auditPrincipals, cancels *auditCancels, leases *auditLeases) *domain.Queues {
	st := RestoreState(b.sn) // (the audit's own: the checkpoint rule restores another)
	for _, id := range st.LiveIDs() {
		x := st.Execution(id) // one aggregate each: a waiter's is made here
		execs[id] = x
		who.unknown[id] = true
		if _, _, g, ok := st.Queues.Locate(id); ok && g {
			granted[id] = true
			cancels.before[id] = true
		}
	}
	for parent, f := range st.Fanouts {
		fans[parent] = &auditFanout{requested: f.Requested, live: map[string]bool{}}
		for _, id := range slices.Sorted(maps.Keys(f.Live)) {
			fans[parent].live[id] = true
		}
	}
	for id, w := range st.Workers {
		var rs map[string]bool
		if r := w.Runners(); len(r) > 0 {
			rs = map[string]bool{}
			for _, name := range r {
				rs[name] = true
			}
		}
		serves[id+"\x00"+w.Incarnation()] = rs
		if w.Status() == domain.WorkerLostStatus {
			lost[id] = map[string]bool{w.Incarnation(): true}
		}
		leases.workers[id] = w.Worker
		for xid := range w.InFlight {
			if x := execs[xid]; x != nil {
				if leases.held[id] == nil {
					leases.held[id] = map[string]*domain.Execution{}
				}
				leases.held[id][xid] = x
			}
		}
	}
	return st.Queues
}
