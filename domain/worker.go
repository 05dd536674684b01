package domain

import (
	"errors"
	"fmt"
	"time"
)

// WorkerStatus is a worker's state as the log tells it.
type WorkerStatus string

// Worker states.
const (
	WorkerUnknown        WorkerStatus = ""
	WorkerActive         WorkerStatus = "active"
	WorkerDrainingStatus WorkerStatus = "draining"
	WorkerStoppedStatus  WorkerStatus = "stopped"
	WorkerLostStatus     WorkerStatus = "lost"
)

// Errors of worker commands.
var (
	ErrWorkerNotRegistered = errors.New("worker not registered")
	ErrWorkerReplaced      = errors.New("worker incarnation replaced or declared lost")
	ErrLeaseNotExpired     = errors.New("worker lease has not expired")
	ErrIncarnationReused   = errors.New("worker incarnation already registered once")
)

// Worker is the aggregate of one worker-<id> stream. Each start of a worker
// process is an incarnation; events of an old incarnation are refused.
type Worker struct {
	id          string
	status      WorkerStatus
	incarnation string
	slots       int
	runners     []string
	lastSeen    time.Time // log time of the incarnation's last event
	version     int64
	past        map[string]struct{} // every incarnation ever registered, the current one included
}

// NewWorker returns the state of worker id's stream before any event.
func NewWorker(id string) *Worker { return &Worker{id: id, version: -1} }

// ID, Status, Incarnation, Slots, Runners, LastSeen and Version read the state.
func (w *Worker) ID() string           { return w.id }
func (w *Worker) Status() WorkerStatus { return w.status }
func (w *Worker) Incarnation() string  { return w.incarnation }
func (w *Worker) Slots() int           { return w.slots }
func (w *Worker) Runners() []string    { return w.runners }
func (w *Worker) LastSeen() time.Time  { return w.lastSeen }
func (w *Worker) Version() int64       { return w.version }

// Clone returns a copy of w that shares nothing with it.
func (w *Worker) Clone() *Worker {
	if w == nil {
		return nil
	}
	c := *w
	c.runners = append([]string(nil), w.runners...)
	c.past = make(map[string]struct{}, len(w.past))
	for k := range w.past {
		c.past[k] = struct{}{}
	}
	return &c
}

// Accepting reports whether the executor may hand new work to this worker.
func (w *Worker) Accepting() bool { return w.status == WorkerActive }

// Register decides a new incarnation with the given slots and runners. An
// incarnation that was registered before, current or replaced, lost or
// stopped, is refused with ErrIncarnationReused: a process that was declared
// lost must start over as a new incarnation, never bring the old one back.
func (w *Worker) Register(incarnation string, slots int, runners []string, host string, pid int) (WorkerRegistered, error) {
	if incarnation == "" || slots < 1 || slots > 100_000 {
		return WorkerRegistered{}, fmt.Errorf("%w: worker %s needs an incarnation and 1..100000 slots", ErrInvalidRequest, w.id)
	}
	if _, seen := w.past[incarnation]; seen {
		return WorkerRegistered{}, fmt.Errorf("worker %s incarnation %s: %w", w.id, incarnation, ErrIncarnationReused)
	}
	return WorkerRegistered{Slots: slots, Runners: runners, Host: host, PID: pid, Incarnation: incarnation}, nil
}

func (w *Worker) current(incarnation string) error {
	switch {
	case w.status == WorkerUnknown:
		return fmt.Errorf("worker %s: %w", w.id, ErrWorkerNotRegistered)
	case w.incarnation != incarnation || w.status == WorkerLostStatus || w.status == WorkerStoppedStatus:
		return fmt.Errorf("worker %s incarnation %s: %w", w.id, incarnation, ErrWorkerReplaced)
	}
	return nil
}

// Heartbeat decides a lease renewal by the given incarnation.
func (w *Worker) Heartbeat(incarnation string, inFlight int) (WorkerHeartbeat, error) {
	return WorkerHeartbeat{Incarnation: incarnation, InFlight: inFlight}, w.current(incarnation)
}

// Drain decides that the incarnation takes nothing new.
func (w *Worker) Drain(incarnation string) (WorkerDraining, error) {
	return WorkerDraining{Incarnation: incarnation}, w.current(incarnation)
}

// Stop decides the clean end of the incarnation.
func (w *Worker) Stop(incarnation string) (WorkerStopped, error) {
	return WorkerStopped{Incarnation: incarnation}, w.current(incarnation)
}

// DeclareLost decides that the current incarnation is gone: its lease (last
// log time + lease) has passed at now, or force says the executor knows it is
// gone (the previous run of an in-process worker).
func (w *Worker) DeclareLost(now time.Time, lease time.Duration, force bool, reason string) (WorkerLost, error) {
	if err := w.current(w.incarnation); err != nil {
		return WorkerLost{}, err
	}
	if !force && now.Sub(w.lastSeen) < lease {
		return WorkerLost{}, fmt.Errorf("worker %s last seen %s: %w", w.id, w.lastSeen.Format(time.RFC3339Nano), ErrLeaseNotExpired)
	}
	return WorkerLost{Incarnation: w.incarnation, Reason: clipReason(reason), LastSeen: w.lastSeen}, nil
}

// Apply folds one event of the worker stream at the given log time.
func (w *Worker) Apply(ev Event, version uint64, at time.Time) {
	w.version = int64(version)
	switch e := ev.(type) {
	case WorkerRegistered:
		w.status, w.incarnation, w.slots, w.runners, w.lastSeen = WorkerActive, e.Incarnation, e.Slots, e.Runners, at
		if w.past == nil {
			w.past = map[string]struct{}{}
		}
		w.past[e.Incarnation] = struct{}{}
	case WorkerHeartbeat:
		if e.Incarnation == w.incarnation {
			w.lastSeen = at
		}
	case WorkerDraining:
		if e.Incarnation == w.incarnation {
			w.status, w.lastSeen = WorkerDrainingStatus, at
		}
	case WorkerStopped:
		if e.Incarnation == w.incarnation {
			w.status, w.lastSeen = WorkerStoppedStatus, at
		}
	case WorkerLost:
		if e.Incarnation == w.incarnation {
			w.status = WorkerLostStatus
		}
	}
}
