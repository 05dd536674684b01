package projections

import (
	"sort"
)

// changeRingSize is how many recent changes the views remember for their
// feeds. A feed reader further behind falls back to a scan of every record.
const changeRingSize = 1 << 18

type changeKind uint8

const (
	kindExecution changeKind = iota + 1
	kindStats
	kindWorker
)

// change says that the record key of a kind changed at a log position.
type change struct {
	pos  uint64
	kind changeKind
	key  string
}

// changeRing keeps the most recent changes in position order.
type changeRing struct {
	buf     []change
	next    int    // where the next change goes
	wrapped bool   // older changes were overwritten
	floor   uint64 // no change before this position was ever added (a restored read model starts here)
}

func newChangeRing(size int) changeRing { return changeRing{buf: make([]change, 0, size)} }

func (r *changeRing) add(c change) {
	if len(r.buf) < cap(r.buf) {
		r.buf = append(r.buf, c)
		return
	}
	r.buf[r.next] = c
	r.next = (r.next + 1) % len(r.buf)
	r.wrapped = true
}

// covers reports whether every change at a position ≥ from is still held.
func (r *changeRing) covers(from uint64) bool {
	return from >= r.floor && (!r.wrapped || r.buf[r.next].pos < from)
}

// each calls fn for the held changes at positions ≥ from, in order, until fn
// returns false.
func (r *changeRing) each(from uint64, fn func(change) bool) {
	n := len(r.buf)
	if n == 0 {
		return
	}
	start := 0
	if r.wrapped {
		start = r.next
	}
	at := func(i int) change { return r.buf[(start+i)%n] }
	i := sort.Search(n, func(i int) bool { return at(i).pos >= from })
	for ; i < n; i++ {
		if !fn(at(i)) {
			return
		}
	}
}

// ExecutionsSince returns, in position order, the current state of each
// execution whose last change is at a position ≥ from (of action, if not
// ""), at most about max of them and about DefaultPageBytes of their JSON
// (never splitting one position), and the
// position to pass as from next time. Each execution appears once, with the
// position of its latest change, so the result is a conflated feed: a reader
// that resumes from the position after the last one it saw misses no final
// state, though it may skip states that were superseded meanwhile.
func (v *Views) ExecutionsSince(from uint64, action string, max int) ([]ExecutionView, uint64) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	match := func(rec *execRecord) bool { return action == "" || rec.action == action }
	var out []ExecutionView
	used := 0 // a batch ends at max executions or past DefaultPageBytes
	next := v.sinceLocked(from, kindExecution, max, func(key string, pos uint64) {
		if rec := v.execs.Get(key); rec != nil && rec.pos == pos && match(rec) {
			out = append(out, v.viewLocked(key, rec))
			used += viewSize(&out[len(out)-1].ExecutionState)
		}
	}, func() []keyPos {
		var all []keyPos
		v.execs.Each(func(id string, rec *execRecord, _ int) {
			if rec.pos >= from && match(rec) {
				all = append(all, keyPos{id, rec.pos})
			}
		})
		return all
	}, func() int {
		if used >= DefaultPageBytes {
			return max
		}
		return len(out)
	})
	return out, next
}

// StatsSince is ExecutionsSince for the actions' queue statistics.
func (v *Views) StatsSince(from uint64, action string, max int) ([]QueueStats, uint64) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	defined := func(ref string) bool {
		a := v.st.Actions[ref]
		return a != nil && a.Defined() && (action == "" || ref == action)
	}
	var out []QueueStats
	next := v.sinceLocked(from, kindStats, max, func(key string, pos uint64) {
		if s := v.st.stats[key]; s != nil && s.pos == pos && defined(key) {
			out = append(out, v.statsLocked(key))
		}
	}, func() []keyPos {
		var all []keyPos
		for ref, s := range v.st.stats {
			if s.pos >= from && defined(ref) {
				all = append(all, keyPos{ref, s.pos})
			}
		}
		return all
	}, func() int { return len(out) })
	return out, next
}

type keyPos struct {
	key string
	pos uint64
}

// sinceLocked walks the changes of kind at positions ≥ from: from the ring
// when it still holds them, else from a scan of every record (scan). visit
// emits the record if it is still current at that position; count says how
// many were emitted. It stops after the
// position where count reached max and returns the position to resume from.
func (v *Views) sinceLocked(from uint64, kind changeKind, max int, visit func(key string, pos uint64), scan func() []keyPos, count func() int) uint64 {
	next := v.st.Next
	if from >= next {
		return from
	}
	full := func(pos uint64) bool {
		if count() >= max {
			next = pos + 1
			return true
		}
		return false
	}
	seen := map[string]uint64{}
	if v.changes.covers(from) {
		stopAt := uint64(0)
		stopped := false
		v.changes.each(from, func(c change) bool {
			if stopped && c.pos != stopAt {
				return false
			}
			if c.kind != kind {
				return true
			}
			if p, ok := seen[c.key]; ok && p == c.pos {
				return true
			}
			seen[c.key] = c.pos
			visit(c.key, c.pos)
			if !stopped && full(c.pos) {
				stopped, stopAt = true, c.pos
			}
			return true
		})
		return next
	}
	all := scan()
	sort.Slice(all, func(i, j int) bool {
		if all[i].pos != all[j].pos {
			return all[i].pos < all[j].pos
		}
		return all[i].key < all[j].key
	})
	for i, kp := range all {
		visit(kp.key, kp.pos)
		if count() >= max && (i+1 == len(all) || all[i+1].pos != kp.pos) {
			return kp.pos + 1
		}
	}
	return next
}
