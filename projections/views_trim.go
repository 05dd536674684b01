package projections

// The read model over a live log that gives up its prefix to the archive
// (docs/log-over-months.md): it starts from a checkpoint when its own
// snapshot is older than the live log's start, and forgets the executions
// that ended before the live log's start (the archive serves them), so its
// memory stays bounded however old the deployment.

import (
	"cmp"
	"slices"
)

// ViewsFromCheckpoint returns the read model of a checkpoint's state: every
// execution live at the checkpoint, in request order, with the state's
// queues, workers, actions and the actions' statistics (counted from
// position 0, or, from a checkpoint of a build that kept none, from the
// checkpoint: State.StatsFrom). What the checkpoint does not hold starts
// empty: the executions that had ended before it (the archive serves them).
func ViewsFromCheckpoint(sn *StateSnapshot) *Views { return viewsFromCheckpoint(sn, changeRingSize) }

// viewsFromCheckpoint is ViewsFromCheckpoint with a ring of ringSize
// recent changes.
func viewsFromCheckpoint(sn *StateSnapshot, ringSize int) *Views {
	v := restoreViews(&ViewsSnapshot{State: *sn}, ringSize)
	type live struct {
		id  string
		req int64
	}
	var ids []live
	for _, id := range v.st.LiveIDs() {
		ids = append(ids, live{id, v.st.Execution(id).RequestedAt().UnixNano()})
	}
	slices.SortStableFunc(ids, func(a, b live) int { return cmp.Or(cmp.Compare(a.req, b.req), cmp.Compare(a.id, b.id)) })
	at := uint64(0)
	if sn.Next > 0 {
		at = sn.Next - 1
	}
	for _, l := range ids {
		x := v.st.Execution(l.id)
		if own, ok := v.st.Queues.WaiterID(l.id); ok {
			l.id = own // one copy of a waiter's id, not two
		}
		rec := &execRecord{action: v.intern(x.Action()), parent: x.Parent(), status: mustCode(x.Status()), seq: len(v.order), pos: at}
		v.order = append(v.order, l.id)
		v.execs.Put(l.id, rec, 0)
		v.byRef[rec.action] = append(v.byRef[rec.action], rec.seq)
	}
	return v
}

// ForgetBefore forgets every ended execution whose last event is below pos
// (the live log's start after a trim): the archive serves them. Live
// executions and those ended at pos or later stay, and so does what
// HoldFrom holds.
func (v *Views) ForgetBefore(pos uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.forgetEnded(0, pos)
}
