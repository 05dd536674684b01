package projections

import "sort"

// CurrentExecutions is where a state feed starts: it returns the position
// the read model has folded up to (next) and a function that pages through
// the current state of every execution that had not ended there (of action,
// or of every action when action is ""), in the order of their latest
// changes (position, then id), at most max a page and little more than
// DefaultPageBytes of their JSON, nil once all are sent.
// An execution that changes after next is left out of the pages: the
// changes from next (ExecutionsSince) carry its newer state. So a feed
// that sends the pages, then the changes from next, misses nothing. Each
// page holds the read lock only while it is built, so a large read model
// never stalls the fold.
func (v *Views) CurrentExecutions(action string) (pages func(max int) []ExecutionView, next uint64) {
	v.mu.RLock()
	var keys []keyPos
	v.execs.Each(func(id string, rec *execRecord, _ int) {
		if rec.final == nil && !rec.status.status().Terminal() && (action == "" || rec.action == action) {
			keys = append(keys, keyPos{id, rec.pos})
		}
	})
	next = v.st.Next
	v.mu.RUnlock()
	sortKeyPos(keys)
	return func(max int) []ExecutionView {
		var out []ExecutionView
		v.mu.RLock()
		defer v.mu.RUnlock()
		used := 0 // a page ends at max executions or past DefaultPageBytes
		for len(keys) > 0 && len(out) < max && used < DefaultPageBytes {
			kp := keys[0]
			keys = keys[1:]
			if rec := v.execs.Get(kp.key); rec != nil && rec.pos == kp.pos {
				out = append(out, v.viewLocked(kp.key, rec))
				used += viewSize(&out[len(out)-1].ExecutionState)
			}
		}
		return out
	}, next
}

// CurrentStats is CurrentExecutions for the queue statistics of every
// defined action (or of action alone).
func (v *Views) CurrentStats(action string) (pages func(max int) []QueueStats, next uint64) {
	v.mu.RLock()
	var keys []keyPos
	for ref, s := range v.st.stats {
		if a := v.st.Actions[ref]; a != nil && a.Defined() && (action == "" || ref == action) {
			keys = append(keys, keyPos{ref, s.pos})
		}
	}
	next = v.st.Next
	v.mu.RUnlock()
	sortKeyPos(keys)
	return func(max int) []QueueStats {
		var out []QueueStats
		v.mu.RLock()
		defer v.mu.RUnlock()
		for len(keys) > 0 && len(out) < max {
			kp := keys[0]
			keys = keys[1:]
			if s := v.st.stats[kp.key]; s != nil && s.pos == kp.pos {
				out = append(out, v.statsLocked(kp.key))
			}
		}
		return out
	}, next
}

func sortKeyPos(all []keyPos) {
	sort.Slice(all, func(i, j int) bool {
		if all[i].pos != all[j].pos {
			return all[i].pos < all[j].pos
		}
		return all[i].key < all[j].key
	})
}
