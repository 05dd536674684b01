package domain

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Waiter is an execution waiting in a queue. Position is the log position of
// its execution.requested event: queues are ordered by it.
type Waiter struct {
	Execution  string
	Key        string
	Position   uint64
	EnqueuedAt time.Time
	Priority   int // 1..4, 1 first
}

// KeyQueue is the FIFO queue and active set of one concurrency-key value.
type KeyQueue struct {
	Key     string
	ref     string // of its action
	waiting fifo
	active  map[string]struct{}
	skips   uint8 // times a total-limited grant passed it while eligible since its last grant (see total.go)
}

// Waiting returns how many executions wait.
func (k *KeyQueue) Waiting() int { return k.waiting.live }

// Active returns how many executions hold a slot (granted and not ended).
func (k *KeyQueue) Active() int { return len(k.active) }

// Next returns the waiter to grant first: the oldest of the highest
// priority.
func (k *KeyQueue) Next() (Waiter, bool) {
	s, ok := k.waiting.first()
	if !ok {
		return Waiter{}, false
	}
	return s.waiter(k.Key), true
}

// Head returns the oldest waiter.
func (k *KeyQueue) Head() (Waiter, bool) {
	s, ok := k.waiting.peek()
	if !ok {
		return Waiter{}, false
	}
	return s.waiter(k.Key), true
}

// EachWaiting calls fn for each waiter in FIFO order until fn returns false.
func (k *KeyQueue) EachWaiting(fn func(Waiter) bool) {
	k.waiting.each(func(s *slot) bool { return fn(s.waiter(k.Key)) })
}

// ActiveIDs returns the executions holding a slot, sorted.
func (k *KeyQueue) ActiveIDs() []string {
	out := make([]string, 0, len(k.active))
	for id := range k.active {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Queue is one action's queues: its policy, whether it is paused, one
// KeyQueue per concurrency-key value, and the version of its queue stream
// (the fence for grants).
type Queue struct {
	Ref     string
	policy  Policy
	defined bool
	paused  bool
	version int64 // last version of queue-<ref>, -1 when empty
	keys    map[string]*KeyQueue
	where   *locator // the Queues' (shared by every Queue)

	// The round robin of the total limit (total.go): the key value of the
	// last grant, and how many executions hold a slot across all keys.
	lastKey string
	hasLast bool
	activeN int

	// Log times of recent grants (grants[gHead:]), oldest first, for the
	// rate limit. They are kept from the first policy with a rate limit on,
	// as many as the largest count and as far back as the longest window any
	// policy has had. A time earlier than the one before it (a clock that
	// went back) is kept as that one, so the list stays sorted; that only
	// ever counts a grant in a window longer.
	grants   []time.Time
	gHead    int
	rateSpan time.Duration
	rateMax  int
}

func (q *Queue) setPolicy(p Policy) {
	q.policy = p
	if rl := p.RateLimit; rl != nil {
		q.rateSpan = max(q.rateSpan, p.RateWindow())
		q.rateMax = max(q.rateMax, rl.Count)
	}
}

func (q *Queue) recordGrant(at time.Time) {
	if q.rateMax == 0 {
		return
	}
	if n := len(q.grants); n > q.gHead && at.Before(q.grants[n-1]) {
		at = q.grants[n-1]
	}
	q.grants = append(q.grants, at)
	cutoff := at.Add(-q.rateSpan)
	for q.gHead < len(q.grants) && (len(q.grants)-q.gHead > q.rateMax || !q.grants[q.gHead].After(cutoff)) {
		q.gHead++
	}
	if q.gHead > 64 && q.gHead*2 > len(q.grants) {
		n := copy(q.grants, q.grants[q.gHead:])
		q.grants, q.gHead = q.grants[:n], 0
	}
}

// RateRoom returns how many grants the rate limit allows at log time now:
// its count less the grants whose log time is after now minus its window
// (math.MaxInt without a rate limit). It never decreases as now grows, so
// judging at an earlier time only ever allows fewer grants.
func (q *Queue) RateRoom(now time.Time) int {
	rl := q.policy.RateLimit
	if rl == nil {
		return math.MaxInt
	}
	cutoff := now.Add(-q.policy.RateWindow())
	live := q.grants[q.gHead:]
	i := sort.Search(len(live), func(i int) bool { return live[i].After(cutoff) })
	return max(rl.Count-(len(live)-i), 0)
}

// Policy returns the action's policy as of the fold.
func (q *Queue) Policy() Policy { return q.policy }

// Defined reports whether the action has been defined.
func (q *Queue) Defined() bool { return q.defined }

// Paused reports whether grants are stopped.
func (q *Queue) Paused() bool { return q.paused }

// Version returns the queue stream's last version (-1 for none): the expected
// version of the next grant.
func (q *Queue) Version() int64 { return q.version }

// Key returns the queue of one key value, or nil.
func (q *Queue) Key(key string) *KeyQueue { return q.keys[key] }

// Keys returns the key values that have a queue, sorted.
func (q *Queue) Keys() []string {
	out := make([]string, 0, len(q.keys))
	for k := range q.keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Waiting and Active sum over all keys.
func (q *Queue) Waiting() (n int) {
	for _, k := range q.keys {
		n += k.Waiting()
	}
	return n
}

// Active returns how many executions of the action hold a slot.
func (q *Queue) Active() (n int) {
	for _, k := range q.keys {
		n += k.Active()
	}
	return n
}

func (q *Queue) key(k string) *KeyQueue {
	kq := q.keys[k]
	if kq == nil {
		kq = &KeyQueue{Key: k, ref: q.Ref, active: map[string]struct{}{}}
		q.keys[k] = kq
	}
	return kq
}

// Grantable returns the waiters that may be granted at time now, at most
// max: for each key, heads in FIFO order while the key has a free slot, and
// no more than the rate limit allows at now. Nothing is grantable while the
// action is paused or undefined.
func (q *Queue) Grantable(max int, now time.Time) []Waiter {
	if q.paused || !q.defined {
		return nil
	}
	max = min(max, q.RateRoom(now))
	if max <= 0 {
		return nil
	}
	if q.totalLimited() {
		return q.grantableTotal(max)
	}
	var out []Waiter
	for _, kq := range q.keys {
		// Up to max from every key, then the oldest max overall: stopping at
		// max across keys would let map order pick which keys are served.
		free := min(q.policy.MaxConcurrent-len(kq.active), max)
		kq.waiting.ordered(func(s *slot) bool {
			if free <= 0 {
				return false
			}
			out = append(out, s.waiter(kq.Key))
			free--
			return true
		})
	}
	sort.Slice(out, func(i, j int) bool { return GrantsBefore(out[i], out[j]) })
	if len(out) > max {
		out = out[:max]
	}
	return out
}

// GrantsBefore orders waiters for grants: a higher priority first, then
// the earlier request.
func GrantsBefore(a, b Waiter) bool {
	if a.Priority != b.Priority {
		return a.Priority < b.Priority
	}
	return a.Position < b.Position
}

// IsWaiting reports whether execution id waits in the queue of key key: a
// grant of anything else is void (see Queues.Apply).
func (q *Queue) IsWaiting(id, key string) bool {
	p, ok := q.where.get(id)
	return ok && p.i >= 0 && p.kq.ref == q.Ref && p.kq.Key == key
}

// CheckGrant reports whether granting execution id at log time at keeps FIFO
// order, the concurrency limit and the rate limit: nil, or an error naming
// what it breaks.
func (q *Queue) CheckGrant(id, key string, at time.Time) error {
	return q.CheckGrantSeen(id, key, at, 0)
}

// CheckGrantSeen is CheckGrant for a grant decided on the log before
// position seen (QueueGranted.Seen; 0: the whole log): the grant may pass
// a waiter of a higher priority that was requested (or requeued) at or
// after seen, which its decision could not know; FIFO order within one
// priority holds regardless (a later request waits behind).
func (q *Queue) CheckGrantSeen(id, key string, at time.Time, seen uint64) error {
	switch {
	case !q.defined:
		return fmt.Errorf("grant of %s: action %q is not defined", id, q.Ref)
	case q.paused:
		return fmt.Errorf("grant of %s: action %q is paused", id, q.Ref)
	}
	kq := q.keys[key]
	if kq == nil {
		return fmt.Errorf("grant of %s: not waiting in %q key %q", id, q.Ref, key)
	}
	head, ok := kq.waiting.firstSeen(seen)
	if !ok || head.id != id {
		if !q.IsWaiting(id, key) {
			return fmt.Errorf("grant of %s: not waiting in %q key %q", id, q.Ref, key)
		}
		if p, _ := q.where.get(id); p.i >= 0 && kq.waiting.items[p.i].priority() > head.priority() {
			return fmt.Errorf("grant of %s (priority %d) passes %s of priority %d (requested at position %d)",
				id, kq.waiting.items[p.i].priority(), head.id, head.priority(), head.pos)
		}
		return fmt.Errorf("grant of %s out of FIFO order: %s (requested at position %d) is ahead of it", id, head.id, head.pos)
	}
	if len(kq.active) >= q.policy.MaxConcurrent {
		return fmt.Errorf("grant of %s exceeds max_concurrent %d of %q key %q", id, q.policy.MaxConcurrent, q.Ref, key)
	}
	if q.totalLimited() {
		if err := q.checkTotal(id, key); err != nil {
			return err
		}
	}
	if q.RateRoom(at) <= 0 {
		rl := q.policy.RateLimit
		return fmt.Errorf("grant of %s at %s exceeds the rate limit of %q (%d per %gs)", id, at.Format(time.RFC3339Nano), q.Ref, rl.Count, rl.PerSeconds)
	}
	return nil
}

// TimedOut returns waiters that have waited longer than the queue timeout at
// time now, oldest first, at most max.
func (q *Queue) TimedOut(now time.Time, max int) []Waiter {
	t := q.policy.QueueTimeout()
	if t <= 0 || max <= 0 {
		return nil
	}
	var out []Waiter
	for _, kq := range q.keys {
		n := 0 // up to max from every key, then the oldest max overall
		kq.waiting.each(func(s *slot) bool {
			w := s.waiter(kq.Key)
			if now.Sub(w.EnqueuedAt) < t || n >= max {
				return false
			}
			out = append(out, w)
			n++
			return true
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Position < out[j].Position })
	if len(out) > max {
		out = out[:max]
	}
	return out
}

// Rejection is a request the queue fold refused to admit: the executor must
// record execution.rejected for it.
type Rejection struct {
	Execution string
	Action    string
	Code      string
	Reason    string
}

// Rejection codes.
const (
	RejectUnknownAction = "unknown_action"
	RejectQueueFull     = "queue_full"
	RejectNoSlot        = "no_slot"
	RejectInvalidInput  = "invalid_input"
	RejectRateLimited   = "rate_limited"
)

// Queues is the fold of every action's queue from the whole log. It decides
// admission deterministically at the position of each execution.requested
// event, so the executor, a rebuild and an audit agree on every queue.
// Apply never validates; CheckGrant says whether a grant is legal. A
// queue.granted for an execution that is not waiting in that queue is void:
// it moves the queue stream's version and nothing else.
type Queues struct {
	byRef   map[string]*Queue
	where   *locator             // live executions (waiting or active) → queue
	pending map[string]Rejection // requested, refused by the fold, not yet rejected in the log
	changed map[string]struct{}  // refs touched since the last TakeChanged
}

// NewQueues returns the fold of an empty log.
func NewQueues() *Queues {
	return &Queues{byRef: map[string]*Queue{}, where: newLocator(0), pending: map[string]Rejection{}, changed: map[string]struct{}{}}
}

// Get returns the queue of action ref, or nil if the log never named it.
func (qs *Queues) Get(ref string) *Queue { return qs.byRef[ref] }

// Refs returns every action ref with a queue, sorted.
func (qs *Queues) Refs() []string {
	out := make([]string, 0, len(qs.byRef))
	for r := range qs.byRef {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// Locate returns the queue and key of a live (waiting or active) execution.
func (qs *Queues) Locate(id string) (ref, key string, granted, ok bool) {
	p, ok := qs.where.get(id)
	if !ok {
		return "", "", false, false
	}
	return p.kq.ref, p.kq.Key, p.i < 0, true
}

// Waiting returns execution id as its execution.requested event left it, if
// it waits in a queue (granted executions are not waiting). It is a new
// aggregate each time: the queue keeps only what the request said, which is
// the whole state of an execution that has no other event yet. An execution
// that has had more events must be found elsewhere first (the caller's
// fold); this answer ignores them.
func (qs *Queues) Waiting(id string) (*Execution, bool) {
	p, ok := qs.where.get(id)
	if !ok || p.i < 0 {
		return nil, false
	}
	return p.kq.waiting.items[p.i].execution(p.kq.ref), true
}

// WaiterID returns the queue's own copy of id if execution id waits in a
// queue, so that a read model restored beside the queues can share it
// instead of keeping another.
func (qs *Queues) WaiterID(id string) (string, bool) {
	p, ok := qs.where.get(id)
	if !ok || p.i < 0 {
		return "", false
	}
	return p.kq.waiting.items[p.i].id, true
}

// IsWaiting reports whether execution id waits in a queue.
func (qs *Queues) IsWaiting(id string) bool {
	p, ok := qs.where.get(id)
	return ok && p.i >= 0
}

// Refused reports whether the fold refused execution id's request and its
// execution.rejected is not in the log yet.
func (qs *Queues) Refused(id string) bool {
	_, ok := qs.pending[id]
	return ok
}

// PendingRejections returns requests the fold refused that have no
// execution.rejected yet, sorted by execution id.
func (qs *Queues) PendingRejections() []Rejection {
	out := make([]Rejection, 0, len(qs.pending))
	for _, r := range qs.pending {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Execution < out[j].Execution })
	return out
}

// TakeChanged returns the refs whose queues changed since the last call.
func (qs *Queues) TakeChanged() []string {
	out := make([]string, 0, len(qs.changed))
	for r := range qs.changed {
		out = append(out, r)
	}
	clear(qs.changed)
	sort.Strings(out)
	return out
}

func (qs *Queues) queue(ref string) *Queue {
	q := qs.byRef[ref]
	if q == nil {
		q = &Queue{Ref: ref, version: -1, keys: map[string]*KeyQueue{}, where: qs.where}
		qs.byRef[ref] = q
	}
	qs.changed[ref] = struct{}{}
	return q
}

// Apply folds one decoded event. env gives its stream, version, position and time.
func (qs *Queues) Apply(env *Envelope, ev Event) {
	switch e := ev.(type) {
	case ActionDefined:
		q := qs.queue(e.Policy.Ref)
		q.setPolicy(e.Policy)
		q.defined = true
	case ActionPolicyChanged:
		qs.queue(e.Policy.Ref).setPolicy(e.Policy)
	case ActionPaused:
		_, ref := SplitStream(env.Stream)
		qs.queue(ref).paused = true
	case ActionResumed:
		_, ref := SplitStream(env.Stream)
		qs.queue(ref).paused = false
	case ExecutionRequested:
		_, id := SplitStream(env.Stream)
		qs.admit(id, env, e)
	case QueueGranted:
		_, ref := SplitStream(env.Stream)
		q := qs.queue(ref)
		q.version = int64(env.Version)
		p, ok := qs.where.get(e.Execution)
		if !ok || p.i < 0 || p.kq != q.keys[e.ConcurrencyKey] {
			// A void grant: the execution is not waiting (it ended before
			// the grant, which on a store without atomic multi-stream
			// appends the queue stream does not fence). It takes no slot.
			return
		}
		kq := p.kq
		if q.totalLimited() {
			q.foldTotalGrant(kq)
		}
		q.lastKey, q.hasLast = kq.Key, true
		qs.where.grant(e.Execution, kq)
		kq.waiting.remove(kq, p.i, qs.where)
		q.recordGrant(env.Time)
		kq.active[e.Execution] = struct{}{}
		q.activeN++
	case QueueActionChanged:
		_, ref := SplitStream(env.Stream)
		qs.queue(ref).version = int64(env.Version)
	case ExecutionRetryScheduled:
		// A failed run backs off: its slot is free; it is in no FIFO until
		// execution.requeued.
		_, id := SplitStream(env.Stream)
		if p, ok := qs.where.get(id); ok && p.i < 0 {
			qs.where.remove(id)
			kq := p.kq
			delete(kq.active, id)
			q := qs.queue(kq.ref)
			q.activeN--
			if kq.Waiting() == 0 && kq.Active() == 0 {
				kq.skips = 0 // (idle: its round starts again)
				if len(q.keys) > 1 {
					delete(q.keys, kq.Key) // as at an end: the key's queue comes back with the requeue
				}
			}
		}
	case ExecutionRequeued:
		_, id := SplitStream(env.Stream)
		if _, ok := qs.where.get(id); ok {
			return // (a log that says so twice: it waits once)
		}
		q := qs.queue(e.Action)
		kq := q.key(e.ConcurrencyKey)
		kq.waiting.push(kq, newSlot(id, env, ExecutionRequested{Action: e.Action, Priority: e.Priority}), qs.where)
	case ExecutionRejected, ExecutionCompleted, ExecutionFailed, ExecutionTimedOut, ExecutionCancelled:
		_, id := SplitStream(env.Stream)
		delete(qs.pending, id)
		p, ok := qs.where.get(id)
		if !ok {
			return
		}
		qs.where.remove(id)
		q := qs.queue(p.kq.ref)
		kq := p.kq
		if p.i < 0 {
			delete(kq.active, id)
			q.activeN--
		} else {
			kq.waiting.remove(kq, p.i, qs.where)
		}
		if kq.Waiting() == 0 && kq.Active() == 0 {
			kq.skips = 0 // (idle: its round starts again)
			if len(q.keys) > 1 {
				delete(q.keys, kq.Key) // drop idle per-key queues; the default key stays
			}
		}
	}
}

// Refusal says whether a request for key value key, at log time at, would be
// refused admission, and why: the code of its execution.rejected
// (RejectQueueFull, RejectNoSlot, RejectRateLimited) and a reason, or ""
// when it would be admitted. For a rate-limited refusal, retryAfter is how
// long until the oldest grant in the window leaves it (0 otherwise). The
// fold decides admission with it, at the position of each request; the API
// uses it to refuse a request early when the queue, as last folded, would.
func (q *Queue) Refusal(key string, at time.Time) (code, reason string, retryAfter time.Duration) {
	waiting, active := 0, 0
	if kq := q.keys[key]; kq != nil {
		waiting, active = kq.Waiting(), kq.Active()
	}
	if waiting >= q.policy.MaxQueueLength {
		return RejectQueueFull, fmt.Sprintf("queue of %q key %q is full (%d waiting, max_queue_length %d)", q.Ref, key, waiting, q.policy.MaxQueueLength), 0
	}
	if q.policy.OnLimit != OnLimitReject {
		return "", "", 0
	}
	if active+waiting >= q.policy.MaxConcurrent || q.paused {
		return RejectNoSlot, fmt.Sprintf("no free slot for %q key %q (max_concurrent %d) and on_limit is reject", q.Ref, key, q.policy.MaxConcurrent), 0
	}
	if rl := q.policy.RateLimit; rl != nil && q.RateRoom(at)-q.Waiting() <= 0 {
		// Room comes back once enough grants have left the window for the
		// waiters and one more. With n of the grants in live inside the
		// window, k = n+waiting-count+1 must leave; they leave in order, so
		// the last of them is live[len(live)+waiting-count].
		win := q.policy.RateWindow()
		live := q.grants[q.gHead:]
		retryAfter = win
		if j := len(live) + q.Waiting() - rl.Count; j >= 0 && j < len(live) {
			// At most one window: a grant logged a moment after the
			// caller read its clock must not ask for a second one.
			retryAfter = min(max(live[j].Add(win).Sub(at), 0), win)
		}
		return RejectRateLimited, fmt.Sprintf("rate limit of %q (%d per %gs) reached and on_limit is reject", q.Ref, rl.Count, rl.PerSeconds), retryAfter
	}
	return "", "", 0
}

func (qs *Queues) admit(id string, env *Envelope, e ExecutionRequested) {
	if e.Items > 0 {
		return // a with_items parent takes no slot; its children queue
	}
	q := qs.queue(e.Action)
	refuse := func(code, reason string) {
		qs.pending[id] = Rejection{Execution: id, Action: e.Action, Code: code, Reason: reason}
	}
	if !q.defined {
		if q.version < 0 { // do not keep queues for names that were never defined
			delete(qs.byRef, e.Action) // (but keep the version of a queue stream that exists: it is the fence)
			delete(qs.changed, e.Action)
		}
		refuse(RejectUnknownAction, fmt.Sprintf("action %q is not defined", e.Action))
		return
	}
	if err := ValidateInput(e.Input); err != nil {
		refuse(RejectInvalidInput, err.Error())
		return
	}
	key, err := q.policy.KeyOf(e.Input)
	if err != nil {
		refuse(RejectInvalidInput, err.Error())
		return
	}
	if code, reason, _ := q.Refusal(key, env.Time); code != "" {
		refuse(code, reason)
		return
	}
	if !e.Due(env.Time).IsZero() {
		return // admitted, but in no FIFO until due (execution.requeued)
	}
	kq := q.key(key)
	kq.waiting.push(kq, newSlot(id, env, e), qs.where)
}
