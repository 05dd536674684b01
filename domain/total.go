package domain

import (
	"fmt"
	"sort"
)

// The total limit and its round robin (Policy.MaxConcurrentTotal).
//
// At most MaxConcurrentTotal executions of the action hold a slot across
// all its key values. A free slot goes to the key values that have an
// eligible waiter (a waiter, and a free slot of the value's own
// max_concurrent) in turn: in the sorted order of key values, starting
// after the value granted last (Queue.LastKey, a fold of the queue
// stream's queue.granted events, so the executor, a rebuild and the audit
// agree on it), one waiter per value and turn, the value's next waiter
// (priority, then request order) within it.
//
// What the audit checks at each grant (CheckGrantSeen): the total limit
// holds, and the grant skips no key value that has been skipped once
// already while eligible since its last grant (a value eligible for the
// first time after the grant's decision was taken may be passed once,
// never twice in a round).

// totalLimited reports whether the queue has a total limit.
func (q *Queue) totalLimited() bool { return q.policy.MaxConcurrentTotal > 0 }

// LastKey returns the key value of the last grant of the queue (and
// whether there was one): where the round robin resumes.
func (q *Queue) LastKey() (string, bool) { return q.lastKey, q.hasLast }

// ActiveTotal returns how many executions hold a slot across all key values.
func (q *Queue) ActiveTotal() int { return q.activeN }

// TotalFree returns how many slots the total limit leaves (math.MaxInt
// without one, never below 0).
func (q *Queue) TotalFree() int {
	if !q.totalLimited() {
		return int(^uint(0) >> 1)
	}
	return max(q.policy.MaxConcurrentTotal-q.activeN, 0)
}

// eligible reports whether key queue kq has a waiter it may grant now
// under its own limit.
func (q *Queue) eligible(kq *KeyQueue) bool {
	return kq.waiting.live > 0 && len(kq.active) < q.policy.MaxConcurrent
}

// between reports whether key k comes strictly after from and strictly
// before to in the cyclic order of key values (the keys the round robin
// passes going from from to to). Without a last grant (hasFrom false) the
// round starts before the smallest key.
func between(k, from string, hasFrom bool, to string) bool {
	if !hasFrom {
		return k < to
	}
	if from < to {
		return from < k && k < to
	}
	// wrapped (or to == from: a full round)
	return k > from || k < to
}

// grantableTotal is Grantable for a total-limited queue: at most max
// waiters, one per eligible key value, in round-robin order from after
// the last grant.
func (q *Queue) grantableTotal(max int) []Waiter {
	max = min(max, q.TotalFree())
	if max <= 0 {
		return nil
	}
	keys := make([]string, 0, len(q.keys))
	for k, kq := range q.keys {
		if q.eligible(kq) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	start := 0
	if q.hasLast {
		start = sort.SearchStrings(keys, q.lastKey)
		if start < len(keys) && keys[start] == q.lastKey {
			start++
		}
	}
	out := make([]Waiter, 0, min(max, len(keys)))
	for i := 0; i < len(keys) && len(out) < max; i++ {
		kq := q.keys[keys[(start+i)%len(keys)]]
		s, _ := kq.waiting.first()
		out = append(out, s.waiter(kq.Key))
	}
	return out
}

// checkTotal is CheckGrantSeen's part for the total limit: the total
// limit holds, and the grant to key does not skip a key value skipped
// once already while eligible.
func (q *Queue) checkTotal(id, key string) error {
	if q.activeN >= q.policy.MaxConcurrentTotal {
		return fmt.Errorf("grant of %s exceeds max_concurrent_total %d of %q", id, q.policy.MaxConcurrentTotal, q.Ref)
	}
	for k, kq := range q.keys {
		if k != key && kq.skips > 0 && q.eligible(kq) && between(k, q.lastKey, q.hasLast, key) {
			return fmt.Errorf("grant of %s to key %q skips key %q a second time in a round (round robin from %q)", id, key, k, q.lastKey)
		}
	}
	return nil
}

// foldTotalGrant records a grant to key value kq in the round robin:
// every eligible key value the grant passes is skipped once more, one it
// passes while not eligible starts a new round (as does kq).
func (q *Queue) foldTotalGrant(kq *KeyQueue) {
	for k, o := range q.keys {
		if o == kq || !between(k, q.lastKey, q.hasLast, kq.Key) {
			continue
		}
		if !q.eligible(o) {
			o.skips = 0
		} else if o.skips < 255 {
			o.skips++
		}
	}
	kq.skips = 0
}

// TotalHolds reports whether the total limit holds back the waiters of key
// value key now: the total is full, or the eligible key values before key
// in the round (from after the last grant) take every free total slot.
// false without a total limit.
func (q *Queue) TotalHolds(key string) bool {
	if !q.totalLimited() {
		return false
	}
	free := q.TotalFree()
	if free == 0 {
		return true
	}
	turn := 0
	for k, kq := range q.keys {
		if k != key && q.eligible(kq) && between(k, q.lastKey, q.hasLast, key) {
			turn++
		}
	}
	return turn >= free
}
