package projections

import (
	"sort"

	"github.com/turnstile/turnstile/domain"
)

// QueuePage answers one page of an action's queue: the waiters from offset
// on, at most limit of them, in the queue's FIFO order (the keys' queues
// interleaved by request position, as Queue lists them), how many wait in
// all, and every active execution; ok is false if the action is not
// defined. It walks only offset+limit waiters of each key's queue, not the
// whole queue, so a page of a queue of 100,000 costs little under the read
// lock.
func (v *Views) QueuePage(ref string, offset, limit int) (page QueueContents, total int, ok bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if a := v.st.Actions[ref]; a == nil || !a.Defined() {
		return QueueContents{}, 0, false
	}
	page = QueueContents{Action: ref, Waiting: []WaiterView{}, Active: []string{}, Position: v.st.Next}
	q := v.st.Queues.Get(ref)
	if q == nil || limit <= 0 {
		return page, 0, true
	}
	page.Paused = q.Paused()
	want := offset + limit
	var merged []WaiterView
	for _, k := range q.Keys() {
		kq := q.Key(k)
		total += kq.Waiting()
		page.Active = append(page.Active, kq.ActiveIDs()...)
		n := 0
		kq.EachWaiting(func(w domain.Waiter) bool {
			merged = append(merged, WaiterView{ID: w.Execution, ConcurrencyKey: w.Key, Position: w.Position, EnqueuedAt: w.EnqueuedAt, Priority: w.Priority})
			n++
			return n < want // a key's first offset+limit hold every waiter of the page
		})
	}
	if len(q.Keys()) > 1 {
		sort.SliceStable(merged, func(i, j int) bool { return merged[i].Position < merged[j].Position })
	}
	if offset < len(merged) {
		page.Waiting = append(page.Waiting, merged[offset:min(want, len(merged))]...)
	}
	sort.Strings(page.Active)
	return page, total, true
}
