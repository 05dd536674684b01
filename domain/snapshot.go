package domain

import (
	"encoding/json"
	"maps"
	"slices"
	"time"
)

// Snapshots are the aggregates' whole state in exported, encodable form, so a
// fold of the log can be saved at a position and resumed from it instead of
// from the start. The promise of each pair is exact: Restore(x.Snapshot())
// answers every question and applies every later event exactly as x does.
// Slices in a snapshot are sorted, so equal states give equal snapshots.

// ExecutionSnapshot is an Execution's state.
type ExecutionSnapshot struct {
	ID, Action, Key, ParentID string
	ItemIndex                 int
	Parent                    bool
	Items, Concurrency        int
	WithItems                 []json.RawMessage
	Asked                     int
	Input                     json.RawMessage
	Traceparent               string `json:",omitempty"` // the request's W3C trace context

	Status                                                  Status
	Worker, Incarnation                                     string
	Attempt                                                 int
	CancelRequested                                         bool
	CancelReason, TakenBack                                 string
	Runs                                                    int       // runs the current handoff allows (0: 1)
	DeferredUntil                                           time.Time // zero unless backing off or delayed
	Priority                                                int       // 0: DefaultPriority
	Version                                                 int64
	RequestedAt, GrantedAt, ScheduledAt, RunningAt, EndedAt time.Time
	ScheduledTimeout                                        time.Duration

	Result      json.RawMessage
	Error, Code string
}

// Snapshot returns x's state.
func (x *Execution) Snapshot() ExecutionSnapshot {
	return ExecutionSnapshot{
		ID: x.id, Action: x.action, Key: x.key, ParentID: x.parentID, ItemIndex: x.itemIndex,
		Parent: x.parent, Items: x.items, Concurrency: x.concurrency, WithItems: x.withItems,
		Asked: x.asked, Input: x.input, Traceparent: x.traceparent,
		Status: x.status, Worker: x.worker, Incarnation: x.incarnation, Attempt: x.attempt,
		CancelRequested: x.cancelRequested, CancelReason: x.cancelReason, TakenBack: x.takenBack,
		Runs: x.runs, DeferredUntil: x.deferredUntil, Priority: x.priority,
		Version: x.version, RequestedAt: x.requestedAt, GrantedAt: x.grantedAt,
		ScheduledAt: x.scheduledAt, RunningAt: x.runningAt, EndedAt: x.endedAt,
		ScheduledTimeout: x.scheduledTimeout, Result: x.result, Error: x.errMsg, Code: x.code,
	}
}

// RestoreExecution returns the execution s describes.
func RestoreExecution(s ExecutionSnapshot) *Execution {
	return &Execution{
		id: s.ID, action: s.Action, key: s.Key, parentID: s.ParentID, itemIndex: s.ItemIndex,
		parent: s.Parent, items: s.Items, concurrency: s.Concurrency, withItems: s.WithItems,
		asked: s.Asked, input: s.Input, traceparent: s.Traceparent,
		status: s.Status, worker: s.Worker, incarnation: s.Incarnation, attempt: s.Attempt,
		cancelRequested: s.CancelRequested, cancelReason: s.CancelReason, takenBack: s.TakenBack,
		runs: s.Runs, deferredUntil: s.DeferredUntil, priority: s.Priority,
		version: s.Version, requestedAt: s.RequestedAt, grantedAt: s.GrantedAt,
		scheduledAt: s.ScheduledAt, runningAt: s.RunningAt, endedAt: s.EndedAt,
		scheduledTimeout: s.ScheduledTimeout, result: s.Result, errMsg: s.Error, code: restoredCode(s),
	}
}

// WorkerSnapshot is a Worker's state.
type WorkerSnapshot struct {
	ID           string
	Status       WorkerStatus
	Incarnation  string
	Slots        int
	Runners      []string
	LastSeen     time.Time
	OwedSince    time.Time // zero: the incarnation owes no sign of life (Worker.Owe)
	Version      int64
	Incarnations []string // every incarnation ever registered, sorted
}

// Snapshot returns w's state.
func (w *Worker) Snapshot() WorkerSnapshot {
	return WorkerSnapshot{ID: w.id, Status: w.status, Incarnation: w.incarnation, Slots: w.slots,
		Runners: w.runners, LastSeen: w.lastSeen, OwedSince: w.owedSince, Version: w.version, Incarnations: slices.Sorted(maps.Keys(w.past))}
}

// RestoreWorker returns the worker s describes.
func RestoreWorker(s WorkerSnapshot) *Worker {
	w := &Worker{id: s.ID, status: s.Status, incarnation: s.Incarnation, slots: s.Slots,
		runners: s.Runners, lastSeen: s.LastSeen, owedSince: s.OwedSince, version: s.Version}
	if s.Incarnations != nil {
		w.past = setOf(s.Incarnations)
	}
	return w
}

// ActionSnapshot is an Action's state.
type ActionSnapshot struct {
	Policy          Policy
	Defined, Paused bool
	Version         int64
}

// Snapshot returns a's state.
func (a *Action) Snapshot() ActionSnapshot {
	return ActionSnapshot{Policy: a.policy, Defined: a.defined, Paused: a.paused, Version: a.version}
}

// RestoreAction returns the action s describes.
func RestoreAction(s ActionSnapshot) *Action {
	return &Action{policy: s.Policy, defined: s.Defined, paused: s.Paused, version: s.Version}
}

// QueuesSnapshot is the state of every action's queues.
type QueuesSnapshot struct {
	Queues  []QueueSnapshot // sorted by Ref
	Pending []Rejection     // sorted by execution
	Changed []string        // sorted
}

// QueueSnapshot is one action's queue.
type QueueSnapshot struct {
	Ref             string
	Policy          Policy
	Defined, Paused bool
	Version         int64
	Keys            []KeyQueueSnapshot // sorted by Key
	Grants          []time.Time        // log times of the grants the rate limit still counts, oldest first
	RateSpan        time.Duration
	RateMax         int
	LastKey         string // the key value of the last grant (HasLast): where the round robin resumes
	HasLast         bool
}

// KeyQueueSnapshot is the queue of one concurrency-key value.
type KeyQueueSnapshot struct {
	Key     string
	Waiting Waiters  // FIFO order
	Active  []string // sorted
	Skips   uint8    // the total limit's round robin: passes while eligible since its last grant
}

// WaiterSnapshot is a waiter: its execution, the position and log time of
// its execution.requested event, and what else that event said, if anything.
type WaiterSnapshot struct {
	Execution  string
	Position   uint64
	EnqueuedAt time.Time
	Request    *WaiterRequest // nil when the request said nothing more (the common case)
	Priority   int            // 0: DefaultPriority
}

// WaiterRequest is what a waiter's execution.requested event said besides
// its action (the queue's) and time: Version is the event's stream version,
// the other fields are the event's.
type WaiterRequest struct {
	Version                       uint64
	Input                         json.RawMessage
	Parent                        string
	ItemIndex, Items, Concurrency int
	WithItems                     []json.RawMessage
	Traceparent                   string `json:",omitempty"` // from the event's metadata
}

// Waiters is a queue's waiters, in FIFO order, laid out as the queue keeps
// them: a queue may hold millions, and a restore then makes no other copy
// of each. NewWaiters, Add and List convert from and to plain
// WaiterSnapshots; Each reads them one at a time, for an encoding.
type Waiters struct {
	slots []slot
	taken bool // a restored queue uses slots: copy them for another
}

// Grow makes room for n more waiters.
func (ws *Waiters) Grow(n int) {
	ws.own()
	ws.slots = slices.Grow(ws.slots, n)
}

// Add appends w, the last waiter now.
func (ws *Waiters) Add(w *WaiterSnapshot) {
	ws.own()
	ws.slots = append(ws.slots, w.slot())
}

// own copies the slots when a restored queue uses them.
func (ws *Waiters) own() {
	if ws.taken {
		ws.slots, ws.taken = slices.Clone(ws.slots), false
	}
}

// Each calls fn with every waiter in FIFO order until fn returns false. fn
// may keep w, and what w.Request points to, only until it returns.
func (ws Waiters) Each(fn func(w *WaiterSnapshot) bool) {
	var w WaiterSnapshot
	var req WaiterRequest
	for i := range ws.slots {
		s := &ws.slots[i]
		w = WaiterSnapshot{Execution: s.id, Position: s.pos, EnqueuedAt: s.time(), Priority: int(s.prio)}
		if r := s.req; r != nil && r.hasFields() {
			req = WaiterRequest{Version: r.version, Input: r.input, Parent: r.parent, ItemIndex: r.itemIndex,
				Items: r.items, Concurrency: r.concurrency, WithItems: r.withItems, Traceparent: r.traceparent}
			w.Request = &req
		}
		if !fn(&w) {
			return
		}
	}
}

// NewWaiters returns the waiters ws.
func NewWaiters(ws ...WaiterSnapshot) Waiters {
	out := Waiters{slots: make([]slot, len(ws))}
	for i := range ws {
		out.slots[i] = ws[i].slot()
	}
	return out
}

// Len returns how many waiters there are.
func (ws Waiters) Len() int { return len(ws.slots) }

// List returns the waiters as WaiterSnapshots.
func (ws Waiters) List() []WaiterSnapshot {
	out := make([]WaiterSnapshot, len(ws.slots))
	for i := range ws.slots {
		out[i] = ws.slots[i].snapshot()
	}
	return out
}

func (s *slot) snapshot() WaiterSnapshot {
	w := WaiterSnapshot{Execution: s.id, Position: s.pos, EnqueuedAt: s.time(), Priority: int(s.prio)}
	if r := s.req; r != nil && r.hasFields() {
		w.Request = &WaiterRequest{Version: r.version, Input: r.input, Parent: r.parent, ItemIndex: r.itemIndex,
			Items: r.items, Concurrency: r.concurrency, WithItems: r.withItems, Traceparent: r.traceparent}
	}
	return w
}

func (w *WaiterSnapshot) slot() slot {
	env, e := Envelope{Position: w.Position, Time: w.EnqueuedAt}, ExecutionRequested{}
	if r := w.Request; r != nil {
		env.Version = r.Version
		e = ExecutionRequested{Input: r.Input, Parent: r.Parent, ItemIndex: r.ItemIndex, Items: r.Items,
			Concurrency: r.Concurrency, WithItems: r.WithItems}
	}
	e.Priority = w.Priority
	s := newSlot(w.Execution, &env, e)
	if r := w.Request; r != nil && r.Traceparent != "" {
		if s.req == nil {
			s.req = new(request)
		}
		s.req.traceparent = r.Traceparent
	}
	return s
}

// Snapshot returns the queues' state.
func (qs *Queues) Snapshot() QueuesSnapshot {
	s := QueuesSnapshot{Changed: slices.Sorted(maps.Keys(qs.changed)), Pending: qs.PendingRejections()}
	for _, ref := range qs.Refs() {
		q := qs.byRef[ref]
		qsn := QueueSnapshot{Ref: ref, Policy: q.policy, Defined: q.defined, Paused: q.paused,
			Version: q.version, Grants: append([]time.Time(nil), q.grants[q.gHead:]...),
			RateSpan: q.rateSpan, RateMax: q.rateMax, LastKey: q.lastKey, HasLast: q.hasLast}
		for _, k := range q.Keys() {
			kq := q.keys[k]
			// (A copy of each slot: what they point to is never changed.)
			ks := KeyQueueSnapshot{Key: k, Waiting: Waiters{slots: make([]slot, 0, kq.Waiting())}, Active: kq.ActiveIDs(), Skips: kq.skips}
			kq.waiting.each(func(s *slot) bool { ks.Waiting.slots = append(ks.Waiting.slots, *s); return true })
			qsn.Keys = append(qsn.Keys, ks)
		}
		s.Queues = append(s.Queues, qsn)
	}
	return s
}

// RestoreQueues returns the queues s describes. The queues keep s's
// waiters themselves; restoring s again copies them.
func RestoreQueues(s QueuesSnapshot) *Queues {
	qs := NewQueues()
	n := 0
	for _, q := range s.Queues {
		for _, k := range q.Keys {
			n += k.Waiting.Len()
		}
	}
	qs.where = newLocator(n)
	for _, r := range s.Pending {
		qs.pending[r.Execution] = r
	}
	for _, ref := range s.Changed {
		qs.changed[ref] = struct{}{}
	}
	for qi, qsn := range s.Queues {
		q := &Queue{Ref: qsn.Ref, policy: qsn.Policy, defined: qsn.Defined, paused: qsn.Paused,
			version: qsn.Version, keys: map[string]*KeyQueue{}, where: qs.where, grants: qsn.Grants,
			rateSpan: qsn.RateSpan, rateMax: qsn.RateMax, lastKey: qsn.LastKey, hasLast: qsn.HasLast}
		for ki, ks := range qsn.Keys {
			kq := &KeyQueue{Key: ks.Key, ref: qsn.Ref, active: setOf(ks.Active), skips: ks.Skips}
			q.activeN += len(ks.Active)
			// The first restore keeps the snapshot's slots themselves.
			items := ks.Waiting.slots
			if ks.Waiting.taken {
				items = slices.Clone(items)
			}
			s.Queues[qi].Keys[ki].Waiting.taken = true
			kq.waiting.items, kq.waiting.live = items, len(items)
			for i := range items {
				qs.where.wait(items[i].id, kq, i)
				kq.waiting.mixed = kq.waiting.mixed || items[i].prio != 0 // (derived: grants go by priority)
			}
			for _, id := range ks.Active {
				qs.where.granted[id] = kq
			}
			q.keys[ks.Key] = kq
		}
		qs.byRef[qsn.Ref] = q
	}
	return qs
}

func setOf(keys []string) map[string]struct{} {
	m := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		m[k] = struct{}{}
	}
	return m
}

// restoredCode is a snapshot's code as a fold from the log would have it: a
// snapshot taken before issue 35 may hold CancelRequestedBefore.
func restoredCode(s ExecutionSnapshot) string {
	if s.Status == StatusCancelled {
		return CancelCode(s.Code)
	}
	return s.Code
}
