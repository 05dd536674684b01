// The read model's answers about actions and their queues: queue_stats,
// action views, a queue's waiters and active executions, and the workers.

package projections

import (
	"sort"
	"time"

	"github.com/turnstile/turnstile/domain"
)

// QueueStats is an action's queue statistics, as API.md names them.
type QueueStats struct {
	Action           string     `json:"action"`
	QueueLength      int        `json:"queue_length"`
	ActiveCount      int        `json:"active_count"`
	MaxConcurrent    int        `json:"max_concurrent"`
	Paused           bool       `json:"paused"`
	OldestEnqueuedAt *time.Time `json:"oldest_enqueued_at"`
	TotalEnqueued    uint64     `json:"total_enqueued"`
	TotalGranted     uint64     `json:"total_granted"`
	TotalCompleted   uint64     `json:"total_completed"`
	TotalFailed      uint64     `json:"total_failed"`
	TotalTimedOut    uint64     `json:"total_timed_out"`
	TotalRejected    uint64     `json:"total_rejected"`
	TotalCancelled   uint64     `json:"total_cancelled"`
	WaitP50Ms        float64    `json:"wait_p50_ms"`
	WaitP95Ms        float64    `json:"wait_p95_ms"`
	Position         uint64     `json:"position"` // the log position these figures are current as of
}

// Stats returns the statistics of a defined action.
func (v *Views) Stats(ref string) (QueueStats, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.st.Actions[ref] == nil || !v.st.Actions[ref].Defined() {
		return QueueStats{}, false
	}
	return v.statsLocked(ref), true
}

// AllStats returns every defined action's statistics, sorted by action.
func (v *Views) AllStats() []QueueStats {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := []QueueStats{}
	for _, ref := range v.refsLocked() {
		out = append(out, v.statsLocked(ref))
	}
	return out
}

func (v *Views) refsLocked() []string {
	refs := make([]string, 0, len(v.st.Actions))
	for ref, a := range v.st.Actions {
		if a.Defined() {
			refs = append(refs, ref)
		}
	}
	sort.Strings(refs)
	return refs
}

func (v *Views) statsLocked(ref string) QueueStats {
	s := v.st.stats[ref]
	if s == nil {
		s = &statsRecord{}
	}
	out := QueueStats{
		Action: ref, Position: s.pos,
		TotalEnqueued: s.enqueued, TotalGranted: s.granted, TotalCompleted: s.completed, TotalFailed: s.failed,
		TotalTimedOut: s.timedOut, TotalRejected: s.rejected, TotalCancelled: s.cancelled,
	}
	if a := v.st.Actions[ref]; a != nil {
		out.MaxConcurrent = a.Policy().MaxConcurrent
		out.Paused = a.Paused()
	}
	if q := v.st.Queues.Get(ref); q != nil {
		out.QueueLength, out.ActiveCount = q.Waiting(), q.Active()
		for _, k := range q.Keys() {
			if w, ok := q.Key(k).Head(); ok && (out.OldestEnqueuedAt == nil || w.EnqueuedAt.Before(*out.OldestEnqueuedAt)) {
				t := w.EnqueuedAt
				out.OldestEnqueuedAt = &t
			}
		}
	}
	if len(s.waits) > 0 {
		p50, p95 := s.percentiles()
		out.WaitP50Ms, out.WaitP95Ms = round3(p50), round3(p95)
	}
	return out
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// ActionView is an action's definition and state.
type ActionView struct {
	domain.Policy
	Paused  bool  `json:"paused"`
	Version int64 `json:"version"`
	// Served is whether a live worker serves the action's runner now
	// (Views.Served); false: its executions wait until one registers it.
	Served bool `json:"served"`
}

// Action returns a defined action.
func (v *Views) Action(ref string) (ActionView, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	a := v.st.Actions[ref]
	if a == nil || !a.Defined() {
		return ActionView{}, false
	}
	return ActionView{Policy: a.Policy(), Paused: a.Paused(), Version: a.Version(), Served: v.servedLocked(a.Policy().Runner)}, true
}

// Actions returns every defined action, sorted by ref.
func (v *Views) Actions() []ActionView {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := []ActionView{}
	for _, ref := range v.refsLocked() {
		a := v.st.Actions[ref]
		out = append(out, ActionView{Policy: a.Policy(), Paused: a.Paused(), Version: a.Version(), Served: v.servedLocked(a.Policy().Runner)})
	}
	return out
}

// QueueContents is an action's queue: the waiting executions in FIFO order,
// then the active ones (granted and not ended), sorted by id.
type QueueContents struct {
	Action   string       `json:"action"`
	Paused   bool         `json:"paused"`
	Waiting  []WaiterView `json:"waiting"`
	Active   []string     `json:"active"`
	Position uint64       `json:"position"` // the log position the queue is as of
}

// WaiterView is a waiting execution: its id, key, and the log position and time
// of its request (the FIFO order).
type WaiterView struct {
	ID             string    `json:"id"`
	ConcurrencyKey string    `json:"concurrency_key,omitempty"`
	Position       uint64    `json:"position"`
	EnqueuedAt     time.Time `json:"enqueued_at"`
	Priority       int       `json:"priority"` // 1..4, 1 first
}

// Queue returns an action's queue.
func (v *Views) Queue(ref string) (QueueContents, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if a := v.st.Actions[ref]; a == nil || !a.Defined() {
		return QueueContents{}, false
	}
	return queueContents(v.st, ref), true
}

func queueContents(st *State, ref string) QueueContents {
	out := QueueContents{Action: ref, Waiting: []WaiterView{}, Active: []string{}, Position: st.Next}
	q := st.Queues.Get(ref)
	if q == nil {
		return out
	}
	out.Paused = q.Paused()
	for _, k := range q.Keys() {
		kq := q.Key(k)
		kq.EachWaiting(func(w domain.Waiter) bool {
			out.Waiting = append(out.Waiting, WaiterView{ID: w.Execution, ConcurrencyKey: w.Key, Position: w.Position, EnqueuedAt: w.EnqueuedAt, Priority: w.Priority})
			return true
		})
		out.Active = append(out.Active, kq.ActiveIDs()...)
	}
	// Keys interleave by request position: one FIFO order for the whole action.
	sort.SliceStable(out.Waiting, func(i, j int) bool { return out.Waiting[i].Position < out.Waiting[j].Position })
	sort.Strings(out.Active)
	return out
}

// WorkerView is a worker as the API shows it.
type WorkerView struct {
	ID          string              `json:"id"`
	Status      domain.WorkerStatus `json:"status"`
	Incarnation string              `json:"incarnation,omitempty"`
	Slots       int                 `json:"slots"`
	Runners     []string            `json:"runners,omitempty"`
	LastSeen    *time.Time          `json:"last_heartbeat,omitempty"`
	InFlight    int                 `json:"in_flight"`
	Executions  []string            `json:"executions"`
}

// Workers returns every worker the log knows, sorted by id.
func (v *Views) Workers() []WorkerView {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := []WorkerView{}
	for _, id := range v.st.WorkerIDs() {
		out = append(out, v.workerLocked(id))
	}
	return out
}

// WorkerFilter chooses a page of workers, by id.
type WorkerFilter struct {
	After string // only ids after this one
	Limit int    // at most this many (< 1: no bound)
	// EndedBefore leaves out the lost and stopped workers last seen before
	// it (zero: none is left out).
	EndedBefore time.Time
}

// WorkerPage returns the workers f chooses, sorted by id, and the id to
// pass as After for the next page ("" on the last one).
func (v *Views) WorkerPage(f WorkerFilter) (page []WorkerView, next string) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	page = []WorkerView{}
	for _, id := range v.st.WorkerIDs() {
		if id <= f.After && f.After != "" {
			continue
		}
		w := v.st.Workers[id]
		if ended := w.Status() == domain.WorkerLostStatus || w.Status() == domain.WorkerStoppedStatus; ended && w.LastSeen().Before(f.EndedBefore) {
			continue
		}
		if f.Limit > 0 && len(page) == f.Limit {
			return page, page[len(page)-1].ID
		}
		page = append(page, v.workerLocked(id))
	}
	return page, ""
}

func (v *Views) workerLocked(id string) WorkerView {
	w := v.st.Workers[id]
	info := WorkerView{ID: id, Status: w.Status(), Incarnation: w.Incarnation(), Slots: w.Slots(),
		Runners: w.Runners(), InFlight: len(w.InFlight), Executions: v.st.HeldBy(id)}
	if info.Executions == nil {
		info.Executions = []string{}
	}
	if t := w.LastSeen(); !t.IsZero() {
		info.LastSeen = &t
	}
	return info
}

// ---- following the log ----
