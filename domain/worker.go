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
	owedSince   time.Time // log time from which the incarnation owes the log a sign of life (zero: it owes none); see Owe
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

// Heartbeat decides a sign of life of the given incarnation (a lease
// renewal in the log; see Owe for when one is owed).
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

// OwedSince returns the log time from which the current incarnation owes
// the log a sign of life (see Owe), and whether it owes one at all.
func (w *Worker) OwedSince() (time.Time, bool) { return w.owedSince, !w.owedSince.IsZero() }

// Owe records that from log time at the current incarnation owes the log a
// sign of life: an event of its own on its stream (a heartbeat at the
// least) within one lease of at. The fold calls it for each handoff to the
// incarnation, and after each event of the incarnation on its stream while
// it holds executions. A debt already running keeps its start; the
// incarnation's next event on its stream clears it. So an incarnation that
// holds nothing and was handed nothing since it last wrote owes nothing,
// whatever the time: an idle worker writes nothing, and its lease never
// lapses. An incarnation that was handed an execution, even one that has
// ended or was taken back since, owes until it writes: a worker that died
// while idle is declared lost one lease after the first handoff to it, and
// handoffs that keep expiring on it do not keep it alive.
func (w *Worker) Owe(incarnation string, at time.Time) {
	if incarnation != w.incarnation || (w.status != WorkerActive && w.status != WorkerDrainingStatus) || !w.owedSince.IsZero() {
		return
	}
	w.owedSince = at
}

// LeaseLapsed reports whether the incarnation owes the log a sign of life
// (Owe) since at least lease before now: the condition DeclareLost needs
// without force, for callers that look before they decide.
func (w *Worker) LeaseLapsed(now time.Time, lease time.Duration) bool {
	since, owes := w.OwedSince()
	return owes && now.Sub(since) >= lease
}

// DeclareLost decides that the current incarnation is gone: it owes the log a
// sign of life (Owe) since at least lease before now, or force says the
// executor knows it is gone (the previous run of an in-process worker). The
// verdict records the lease it was judged by (none when forced), so the
// audit can check it by log time.
func (w *Worker) DeclareLost(now time.Time, lease time.Duration, force bool, reason string) (WorkerLost, error) {
	if err := w.current(w.incarnation); err != nil {
		return WorkerLost{}, err
	}
	ev := WorkerLost{Incarnation: w.incarnation, Reason: clipReason(reason), LastSeen: w.lastSeen}
	if force {
		return ev, nil
	}
	since, owes := w.OwedSince()
	if !owes {
		return WorkerLost{}, fmt.Errorf("worker %s holds nothing and was handed nothing since %s: %w", w.id, w.lastSeen.Format(time.RFC3339Nano), ErrLeaseNotExpired)
	}
	if !w.LeaseLapsed(now, lease) {
		return WorkerLost{}, fmt.Errorf("worker %s owes a sign of life since %s: %w", w.id, since.Format(time.RFC3339Nano), ErrLeaseNotExpired)
	}
	ev.OwedSince, ev.LeaseMillis = since, lease.Milliseconds()
	return ev, nil
}

// CheckLost says why verdict, at log time at, was declared before the
// incarnation's lease had passed by log time ("" if it had, or if the
// verdict records no lease: a forced one, or one of a log before leases
// were recorded). The audit calls it on the state before the verdict.
func (w *Worker) CheckLost(verdict WorkerLost, at time.Time) string {
	if verdict.LeaseMillis <= 0 || verdict.Incarnation != w.incarnation {
		return ""
	}
	lease := time.Duration(verdict.LeaseMillis) * time.Millisecond
	since, owes := w.OwedSince()
	switch {
	case !owes:
		return fmt.Sprintf("worker %s incarnation %s declared lost while it held nothing and was handed nothing since its last event at %s",
			w.id, w.incarnation, w.lastSeen.Format(time.RFC3339Nano))
	case at.Sub(since) < lease:
		return fmt.Sprintf("worker %s incarnation %s declared lost %s after it owed a sign of life (since %s), before its lease of %s",
			w.id, w.incarnation, at.Sub(since), since.Format(time.RFC3339Nano), lease)
	}
	return ""
}

// Apply folds one event of the worker stream at the given log time.
func (w *Worker) Apply(ev Event, version uint64, at time.Time) {
	w.version = int64(version)
	switch e := ev.(type) {
	case WorkerRegistered:
		w.status, w.incarnation, w.slots, w.runners, w.lastSeen = WorkerActive, e.Incarnation, e.Slots, e.Runners, at
		w.owedSince = time.Time{}
		if w.past == nil {
			w.past = map[string]struct{}{}
		}
		w.past[e.Incarnation] = struct{}{}
	case WorkerHeartbeat:
		if e.Incarnation == w.incarnation {
			w.lastSeen, w.owedSince = at, time.Time{}
		}
	case WorkerDraining:
		if e.Incarnation == w.incarnation {
			w.status, w.lastSeen, w.owedSince = WorkerDrainingStatus, at, time.Time{}
		}
	case WorkerStopped:
		if e.Incarnation == w.incarnation {
			w.status, w.lastSeen, w.owedSince = WorkerStoppedStatus, at, time.Time{}
		}
	case WorkerLost:
		if e.Incarnation == w.incarnation {
			w.status, w.owedSince = WorkerLostStatus, time.Time{}
		}
	}
}
