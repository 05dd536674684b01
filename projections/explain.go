package projections

import (
	"context"
	"slices"
	"time"

	"github.com/turnstile/turnstile/domain"
)

// Reasons an execution is not running now (Explanation.WaitingFor).
const (
	WaitSlot      = "slot"       // its key's max_concurrent executions hold every slot
	WaitTotalSlot = "total_slot" // max_concurrent_total: the total is full, or key values before its own in the round take the free slots
	WaitPaused    = "paused"     // its action is paused
	WaitRateLimit = "rate_limit" // the rate limit allows no grant now
	WaitBackoff   = "backoff"    // it backs off after a failed run
	WaitRunAt     = "run_at"     // its request's run_at / delay_seconds has not come
	WaitPriority  = "priority"   // waiters of a higher priority are ahead of it
	WaitNoWorker  = "no_worker"  // no live worker with a free slot serves its runner
	WaitResource  = "resource"   // a resource it needs has too few free units, or its rate allows no grant now
)

// Explanation says why an execution is not running now: its status, its
// place among its queue's waiters in grant order (Position 1 is next; 0
// when it is not waiting in a queue), how many are ahead of it, and every
// reason it is not granted now (none once it is granted or has ended).
type Explanation struct {
	Status     domain.Status `json:"status"`
	Position   int           `json:"position"`
	Ahead      int           `json:"ahead"`
	WaitingFor []string      `json:"waiting_for"`
	// Reasons details WaitingFor, one entry per reason in the same order
	// (added beside it, which keeps its strings): a resource names the
	// resource, its key value and its use.
	Reasons []Reason `json:"reasons"`
	LogAt   uint64   `json:"log_position"` // the fold's position: the answer holds for the log up to it
}

// Reason is one reason an execution waits; for WaitResource, the resource
// (and key value) it waits for, units in use of that key value and the
// limit, or the rate limit that allows no grant now.
type Reason struct {
	Reason        string            `json:"reason"`
	Resource      string            `json:"resource,omitempty"`
	Key           string            `json:"key,omitempty"`
	InUse         int               `json:"in_use,omitempty"`
	MaxConcurrent int               `json:"max_concurrent,omitempty"`
	RateLimit     *domain.RateLimit `json:"rate_limit,omitempty"`
}

// Explain answers for execution id at time now from the fold the executor
// decides with (the same State, the same queue order, limits and rate
// limit as its grants): false when the fold does not hold it (unknown,
// or ended: the caller reads its final state elsewhere).
func (s *State) Explain(id string, now time.Time) (Explanation, bool) {
	x := s.Execution(id)
	if x == nil {
		return Explanation{}, false
	}
	out := Explanation{Status: x.Status(), WaitingFor: []string{}, Reasons: []Reason{}, LogAt: s.Next}
	defer func() { // every reason without details
		for _, w := range out.WaitingFor[len(out.Reasons):] {
			out.Reasons = append(out.Reasons, Reason{Reason: w})
		}
	}()
	if x.Status() != domain.StatusRequested || x.IsParent() {
		return out, true
	}
	if _, deferred := x.Deferred(); deferred {
		if x.TakenBack() == domain.TakenBackRunFailed {
			out.WaitingFor = append(out.WaitingFor, WaitBackoff)
		} else {
			out.WaitingFor = append(out.WaitingFor, WaitRunAt)
		}
		return out, true
	}
	ref, key, granted, ok := s.Queues.Locate(id)
	q := s.Queues.Get(ref)
	if !ok || granted || q == nil {
		return out, true // (granted, its handoff being written; or refused, its rejection being written)
	}
	kq := q.Key(key)
	var me domain.Waiter
	kq.EachWaiting(func(w domain.Waiter) bool {
		if w.Execution == id {
			me = w
			return false
		}
		return true
	})
	higher := false
	kq.EachWaiting(func(w domain.Waiter) bool {
		if domain.GrantsBefore(w, me) {
			out.Ahead++
			higher = higher || w.Priority < me.Priority
		}
		return true
	})
	out.Position = out.Ahead + 1
	p := q.Policy()
	if q.Paused() {
		out.WaitingFor = append(out.WaitingFor, WaitPaused)
	}
	if kq.Active()+out.Ahead >= p.MaxConcurrent {
		out.WaitingFor = append(out.WaitingFor, WaitSlot)
	}
	if q.TotalHolds(key) {
		out.WaitingFor = append(out.WaitingFor, WaitTotalSlot)
	}
	if q.RateRoom(now) <= out.Ahead {
		out.WaitingFor = append(out.WaitingFor, WaitRateLimit)
	}
	if higher {
		out.WaitingFor = append(out.WaitingFor, WaitPriority)
	}
	for _, n := range p.Resources {
		if why, ok := s.resourceHolds(n, x.Input(), now); ok {
			for _, w := range out.WaitingFor[len(out.Reasons):] {
				out.Reasons = append(out.Reasons, Reason{Reason: w})
			}
			out.WaitingFor = append(out.WaitingFor, WaitResource)
			out.Reasons = append(out.Reasons, why)
		}
	}
	if !s.workerServes(p.Runner) {
		out.WaitingFor = append(out.WaitingFor, WaitNoWorker)
	}
	return out, true
}

// resourceHolds says whether need n holds back an execution with input in
// at time now: too few free units of its key value, or no grant left in
// its rate window.
func (s *State) resourceHolds(n domain.ResourceNeed, in []byte, now time.Time) (Reason, bool) {
	r := s.Resources.Get(n.Name)
	why := Reason{Reason: WaitResource, Resource: n.Name}
	if r == nil || !r.Defined() {
		return why, true
	}
	l := r.Limit()
	why.Key, why.MaxConcurrent = l.KeyValue(in), l.MaxConcurrent
	if k := r.Key(why.Key); k != nil {
		why.InUse = k.InUse
	}
	units, grants := r.Room(why.Key, now)
	if grants <= 0 {
		why.RateLimit = l.RateLimit
	}
	return why, n.Units > units || grants <= 0
}

// workerServes reports whether a live worker with a free slot runs runner
// (a worker that names no runners runs every one), as the executor picks
// workers.
func (s *State) workerServes(runner string) bool {
	for _, w := range s.Workers {
		if w.Free() > 0 && (len(w.Runners()) == 0 || slices.Contains(w.Runners(), runner)) {
			return true
		}
	}
	return false
}

// Explain answers for execution id from the live fold at time now (see
// State.Explain); an execution that has ended is answered from its view,
// with no reason to wait.
func (v *Views) Explain(id string, now time.Time) (Explanation, bool) {
	v.mu.RLock()
	e, ok := v.st.Explain(id, now)
	v.mu.RUnlock()
	if ok {
		return e, true
	}
	view, ok := v.View(id)
	if !ok {
		return Explanation{}, false
	}
	return Explanation{Status: view.Status, WaitingFor: []string{}, Reasons: []Reason{}, LogAt: v.Next()}, true
}

// Explain answers for execution id once the live read model holds what
// the log held when it was asked (see Views.Explain).
func (q *Queries) Explain(ctx context.Context, id string, now time.Time) (Explanation, bool) {
	return q.CaughtUp(ctx).Explain(id, now)
}
