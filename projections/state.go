// Package projections folds the log into read models: the lifecycle state the
// executor decides on (queues, live executions, workers), the API's views
// (executions, queue stats, workers), their checkpoints, rebuilds and feeds.
package projections

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore/codec"
)

// WorkerState is a worker as the log tells it, with the executions it holds
// (handed to it and not ended or taken back).
type WorkerState struct {
	*domain.Worker
	InFlight map[string]struct{}
}

// Free returns how many more executions the worker may be handed now.
func (w *WorkerState) Free() int {
	if !w.Accepting() {
		return 0
	}
	return w.Slots() - len(w.InFlight)
}

// State is the fold of the whole log that decisions are made on: every
// action's queues, every execution that has not ended, and every worker.
// It is deterministic: the same events give the same State.
//
// An execution that waits in a queue and has no event but its request is
// kept by its queue alone (domain.Queues.Waiting rebuilds it): a million
// waiters then cost a queue slot each, not an aggregate. Execution finds
// any execution that has not ended, wherever it is kept.
type State struct {
	Queues  *domain.Queues
	live    map[string]*domain.Execution // executions that have not ended, but for those only their queue keeps
	Workers map[string]*WorkerState
	Actions map[string]*domain.Action
	// Schedules holds every schedule ever defined, by ref (see domain.Schedule).
	Schedules map[string]*domain.Schedule
	// Resources holds every resource and who holds its units.
	Resources *domain.Resources
	Next      uint64 // position after the last applied event

	// Attention holds live executions the executor must act on besides
	// grants: taken back after a handoff (scheduling, to hand again or fail),
	// a pre-handoff cancellation request, or a with_items parent.
	Attention map[string]struct{}

	// Fanouts holds, for each live with_items parent, its children as the
	// log shows them.
	Fanouts map[string]*Fanout

	// Unscheduled holds the live executions whose queue.granted is in the
	// log but whose execution.scheduling is not, with the grant's event id.
	// On a store with atomic multi-stream appends this never lasts past the
	// grant's own append; on one without, it is a grant whose execution's
	// events are still to come (or were cut short: the executor completes
	// them). Such an execution holds its slot and is in StatusRequested.
	Unscheduled map[string]uuid.UUID

	// Announced holds, per action ref, a change announced on its queue
	// stream (a queue.action_changed carrying its action event, written
	// before it on a store without atomic multi-stream appends) that the
	// action stream does not show yet. Nothing may be granted from that
	// queue until it does.
	Announced map[string]Announcement

	// Deferred holds the live executions that wait in no FIFO until a log
	// time: backing off after a failed run (execution.retry_scheduled), or
	// requested with run_at / delay_seconds, with no execution.requeued yet;
	// the executor requeues them then.
	Deferred map[string]time.Time

	// Ended is called (if set) for each execution when it reaches a terminal
	// state, with its final state, before it leaves Live.
	Ended func(x *domain.Execution)

	// stats holds every action's statistics (stats.go), counted from
	// position statsFrom.
	stats     map[string]*statsRecord
	statsFrom uint64
}

// NewState returns the fold of an empty log.
func NewState() *State {
	return &State{
		Queues:    domain.NewQueues(),
		live:      map[string]*domain.Execution{},
		Workers:   map[string]*WorkerState{},
		Actions:   map[string]*domain.Action{},
		Schedules: map[string]*domain.Schedule{},
		Resources: domain.NewResources(),
		Attention: map[string]struct{}{},
		Fanouts:   map[string]*Fanout{},

		Unscheduled: map[string]uuid.UUID{},
		Announced:   map[string]Announcement{},
		Deferred:    map[string]time.Time{},
		stats:       map[string]*statsRecord{},
	}
}

// Announcement is an action change announced before its action event.
type Announcement struct {
	Position      uint64          // of the queue.action_changed
	ActionVersion uint64          // the version the action event takes
	Event         domain.Envelope // the action event to append (ID zero if it did not decode)
}

// Fanout is a with_items parent's children as the log shows them. Children
// are requested in item order, so items 0..Requested-1 have been requested.
type Fanout struct {
	Requested int                 // children requested so far
	Ended     int                 // of those, how many have ended
	Failed    int                 // of those, how many ended other than completed
	Live      map[string]struct{} // requested and not ended
	// Announce is the id of the parent's latest execution.children_requested:
	// children it announced that are not requested yet (Requested <
	// ChildrenRequested) are written with ids derived from it.
	Announce uuid.UUID
}

// InFlight returns how many children are requested and not ended.
func (f *Fanout) InFlight() int { return f.Requested - f.Ended }

// Execution returns execution id if it has not ended, nil otherwise. For an
// execution that only waits (see State) it is a new aggregate each call, as
// its request left it; any other is the fold's own. Either way the caller
// must not change it (its commands do not).
func (s *State) Execution(id string) *domain.Execution {
	if x := s.live[id]; x != nil {
		return x
	}
	if x, ok := s.Queues.Waiting(id); ok {
		return x
	}
	return nil
}

// IsLive reports whether execution id has not ended (Execution(id) != nil).
func (s *State) IsLive(id string) bool {
	if _, ok := s.live[id]; ok {
		return true
	}
	return s.Queues.IsWaiting(id)
}

// LiveIDs returns the executions that have not ended, sorted. It visits
// every waiter: for tests and reports, not for each event.
func (s *State) LiveIDs() []string {
	ids := make([]string, 0, len(s.live))
	for id := range s.live {
		ids = append(ids, id)
	}
	for _, ref := range s.Queues.Refs() {
		q := s.Queues.Get(ref)
		for _, k := range q.Keys() {
			q.Key(k).EachWaiting(func(w domain.Waiter) bool {
				if _, ok := s.live[w.Execution]; !ok {
					ids = append(ids, w.Execution)
				}
				return true
			})
		}
	}
	sort.Strings(ids)
	return ids
}

// Apply decodes and folds one event. Events at positions already applied are
// ignored, so a batch may be delivered twice without harm.
func (s *State) Apply(env *domain.Envelope) error {
	if env.Position < s.Next {
		return nil
	}
	if env.Type == domain.TypeCheckpointPart { // changes nothing: not decoded (up to 512 KiB)
		s.Next = env.Position + 1
		return nil
	}
	ev, err := codec.Events.Decode(env)
	if err != nil {
		return fmt.Errorf("fold position %d: %w", env.Position, err)
	}
	s.ApplyDecoded(env, ev)
	return nil
}

// ApplyDecoded folds an event already decoded.
func (s *State) ApplyDecoded(env *domain.Envelope, ev domain.Event) { s.apply(env, ev) }

// apply folds an event and returns, for an event of an execution stream, the
// execution as the event left it (nil if the event changed no execution).
// An execution that ended with it has left the fold already.
func (s *State) apply(env *domain.Envelope, ev domain.Event) (touched *domain.Execution) {
	if env.Position < s.Next {
		return nil
	}
	s.Next = env.Position + 1
	cat, id := domain.SplitStream(env.Stream)
	fresh := false // the execution is new with this event
	switch cat {
	case domain.StreamAction:
		a := s.Actions[id]
		if a == nil {
			a = domain.NewAction()
			s.Actions[id] = a
		}
		a.Apply(ev, env.Version)
		if an, ok := s.Announced[id]; ok && env.Version >= an.ActionVersion {
			delete(s.Announced, id)
		}
	case domain.StreamQueue:
		if c, ok := ev.(domain.QueueActionChanged); ok && len(c.Event) > 0 {
			s.announce(env, id, c)
		}
	case domain.StreamWorker:
		w := s.Workers[id]
		if w == nil {
			w = &WorkerState{Worker: domain.NewWorker(id), InFlight: map[string]struct{}{}}
			s.Workers[id] = w
		}
		w.Apply(ev, env.Version, env.Time)
		if s.holdsCurrent(w) {
			w.Owe(w.Incarnation(), env.Time) // it still holds executions: its next sign of life is due within a lease
		}
	case domain.StreamSchedule:
		s.schedule(id).Apply(ev, env.Version, env.Time)
	case domain.StreamResource:
		s.Resources.Apply(env, ev)
	case domain.StreamExecution:
		if r, ok := ev.(domain.ExecutionRequested); ok && r.Schedule != "" {
			s.noteTick(r)
		}
		x := s.live[id]
		if x == nil {
			if w, ok := s.Queues.Waiting(id); ok {
				x = w // a waiter's first event after its request: the fold keeps it from now on
			} else if _, ok := ev.(domain.ExecutionRequested); ok {
				x, fresh = domain.NewExecution(id), true
			} else {
				break // an event for an ended (or unknown) execution: nothing live changes
			}
			s.live[id] = x
		}
		touched = x
		prevWorker, prevStatus := x.Worker(), x.Status()
		x.Apply(ev, env.Version, env.Time)
		if _, ok := ev.(domain.ExecutionRequested); ok && len(env.Metadata) > 0 {
			x.SetTraceparent(domain.TraceparentOf(env.Metadata))
		}
		s.trackWorker(id, prevWorker, prevStatus, x)
		if sc, ok := ev.(domain.ExecutionScheduled); ok {
			if w := s.Workers[sc.Worker]; w != nil {
				w.Owe(sc.Incarnation, env.Time) // handed work: the incarnation owes a sign of life within a lease
			}
		}
		s.trackFanout(id, x, ev, env.ID)
		if x.Status() != domain.StatusRequested {
			delete(s.Unscheduled, id)
		}
		switch ev.(type) {
		case domain.ExecutionRetryScheduled:
			s.trackDeferred(id, x)
			s.Resources.Release(id) // (backing off frees its units, as its slot)
		case domain.ExecutionRequeued:
			s.trackDeferred(id, x)
		}
		if x.Status().Terminal() {
			s.Resources.Release(id)
			delete(s.Deferred, id)
			if s.Ended != nil {
				s.Ended(x)
			}
			delete(s.live, id)
			delete(s.Attention, id)
			delete(s.Fanouts, id)
		} else if needsExecutor(x, ev) {
			s.Attention[id] = struct{}{}
		} else {
			delete(s.Attention, id)
		}
	}
	g, granted := ev.(domain.QueueGranted)
	if q := s.Queues.Get(id); granted && q != nil && q.IsWaiting(g.Execution, g.ConcurrencyKey) {
		// The grant takes the execution out of its queue's waiters (of
		// queue id, as Queues.Apply reads it): the fold keeps it from now
		// on, if it does not already.
		if _, ok := s.live[g.Execution]; !ok {
			x, _ := s.Queues.Waiting(g.Execution)
			s.live[g.Execution] = x
		}
	}
	s.Queues.Apply(env, ev)
	if granted {
		x := s.live[g.Execution]
		if _, _, granted, _ := s.Queues.Locate(g.Execution); granted && x != nil && x.Status() == domain.StatusRequested {
			s.Unscheduled[g.Execution] = env.ID
		}
	}
	if fresh && s.Queues.IsWaiting(id) {
		// A new execution the queue admitted: its queue keeps it (see State).
		delete(s.live, id)
	} else if fresh && touched != nil && !s.Queues.Refused(id) {
		s.trackDeferred(id, touched) // a request not due yet (run_at, delay_seconds)
	}
	s.countStats(env, ev, cat, id, touched, fresh)
	return touched
}

// trackDeferred keeps Deferred equal to the live executions deferred.
func (s *State) trackDeferred(id string, x *domain.Execution) {
	if until, ok := x.Deferred(); ok {
		s.Deferred[id] = until
	} else {
		delete(s.Deferred, id)
	}
}

// announce records an action change announced before its action event,
// unless the action stream already shows it.
func (s *State) announce(env *domain.Envelope, ref string, c domain.QueueActionChanged) {
	if a := s.Actions[ref]; a != nil && a.Version() >= int64(c.ActionVersion) {
		return
	}
	an := Announcement{Position: env.Position, ActionVersion: c.ActionVersion}
	if json.Unmarshal(c.Event, &an.Event) != nil {
		an.Event = domain.Envelope{}
	}
	s.Announced[ref] = an
}

// trackWorker keeps WorkerState.InFlight equal to the executions handed to
// each worker and not yet ended or taken back. A with_items parent's
// execution.running names no worker (the executor fans it out): it makes
// no worker, so no phantom "" is listed.
func (s *State) trackWorker(id, prevWorker string, prevStatus domain.Status, x *domain.Execution) {
	held := func(st domain.Status) bool { return st == domain.StatusScheduled || st == domain.StatusRunning }
	if held(prevStatus) && (!held(x.Status()) || prevWorker != x.Worker()) {
		if w := s.Workers[prevWorker]; w != nil {
			delete(w.InFlight, id)
		}
	}
	if held(x.Status()) && x.Worker() != "" { // a with_items parent runs on no worker
		w := s.Workers[x.Worker()]
		if w == nil {
			w = &WorkerState{Worker: domain.NewWorker(x.Worker()), InFlight: map[string]struct{}{}}
			s.Workers[x.Worker()] = w
		}
		w.InFlight[id] = struct{}{}
	}
}

// trackFanout keeps the Fanout of each live with_items parent.
func (s *State) trackFanout(id string, x *domain.Execution, ev domain.Event, evID uuid.UUID) {
	if x.IsParent() {
		switch ev.(type) {
		case domain.ExecutionRequested:
			s.Fanouts[id] = &Fanout{Live: map[string]struct{}{}}
		case domain.ExecutionChildrenRequested:
			if f := s.Fanouts[id]; f != nil {
				f.Announce = evID
			}
		}
		return
	}
	parent := x.Parent()
	if parent == "" {
		return
	}
	f := s.Fanouts[parent]
	if f == nil {
		return // the parent has ended (or is unknown): nothing to count
	}
	if _, ok := ev.(domain.ExecutionRequested); ok {
		f.Requested++
		f.Live[id] = struct{}{}
		return
	}
	if x.Status().Terminal() {
		if _, live := f.Live[id]; live {
			delete(f.Live, id)
			f.Ended++
			if x.Status() != domain.StatusCompleted {
				f.Failed++
			}
		}
	}
}

// WorkerIDs returns the known worker ids, sorted.
func (s *State) WorkerIDs() []string {
	out := make([]string, 0, len(s.Workers))
	for id := range s.Workers {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// holdsCurrent reports whether w's current incarnation holds an execution.
func (s *State) holdsCurrent(w *WorkerState) bool {
	for xid := range w.InFlight {
		if x := s.live[xid]; x != nil && x.Incarnation() == w.Incarnation() {
			return true
		}
	}
	return false
}

// HeldBy returns the live executions handed to worker id, sorted.
func (s *State) HeldBy(id string) []string {
	w := s.Workers[id]
	if w == nil {
		return nil
	}
	out := make([]string, 0, len(w.InFlight))
	for x := range w.InFlight {
		out = append(out, x)
	}
	sort.Strings(out)
	return out
}

// needsExecutor reports whether the executor must look at x after ev.
func needsExecutor(x *domain.Execution, ev domain.Event) bool {
	if x.Owner() != domain.OwnerExecutor {
		return false
	}
	switch ev.(type) {
	case domain.ExecutionScheduling:
		return false // the scheduled event follows in the same append
	}
	return x.IsParent() || x.Status() == domain.StatusScheduling || x.CancelRequested()
}

func (s *State) schedule(ref string) *domain.Schedule {
	sc := s.Schedules[ref]
	if sc == nil {
		sc = &domain.Schedule{}
		s.Schedules[ref] = sc
	}
	return sc
}

// noteTick records a schedule tick's request in its schedule.
func (s *State) noteTick(r domain.ExecutionRequested) {
	if t, err := time.Parse(time.RFC3339, r.Tick); err == nil {
		s.schedule(r.Schedule).NoteTick(t)
	}
}
