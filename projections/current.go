package projections

import "sort"

// CurrentExecutions returns the current state of every execution that has
// not ended (of action, or of every action when action is ""), in the
// order of their latest changes (position, then id), and the position the
// read model has folded up to: a state feed that starts with these states
// and then sends the changes from that position misses nothing.
func (v *Views) CurrentExecutions(action string) ([]ExecutionView, uint64) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var keys []keyPos
	v.execs.Each(func(id string, rec *execRecord, _ int) {
		if rec.final == nil && !rec.status.status().Terminal() && (action == "" || rec.action == action) {
			keys = append(keys, keyPos{id, rec.pos})
		}
	})
	sortKeyPos(keys)
	out := make([]ExecutionView, 0, len(keys))
	for _, kp := range keys {
		out = append(out, v.viewLocked(kp.key, v.execs.Get(kp.key)))
	}
	return out, v.st.Next
}

// CurrentStats returns the queue statistics of every defined action (or of
// action alone), in the order of their latest changes, and the position
// the read model has folded up to, as CurrentExecutions does.
func (v *Views) CurrentStats(action string) ([]QueueStats, uint64) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var keys []keyPos
	for ref, s := range v.stats {
		if a := v.st.Actions[ref]; a != nil && a.Defined() && (action == "" || ref == action) {
			keys = append(keys, keyPos{ref, s.pos})
		}
	}
	sortKeyPos(keys)
	out := make([]QueueStats, 0, len(keys))
	for _, kp := range keys {
		out = append(out, v.statsLocked(kp.key))
	}
	return out, v.st.Next
}

func sortKeyPos(all []keyPos) {
	sort.Slice(all, func(i, j int) bool {
		if all[i].pos != all[j].pos {
			return all[i].pos < all[j].pos
		}
		return all[i].key < all[j].key
	})
}
