// The checker's own model of the lease rule (it shares no code with
// domain.Worker): a worker incarnation owes the log a sign of life from a
// handoff to it while it owed none, and from each of its own events on its
// stream while it holds executions; its own next event there pays the
// debt. A worker.lost judged by a lease (lease_ms) must come at least that
// lease after the start of the incarnation's debt, by log time; a verdict on
// an incarnation that owes nothing (an idle worker, which writes nothing) is
// a violation.

package sim

import (
	"fmt"
	"time"

	"github.com/turnstile/turnstile/domain"
)

type leaseModel struct {
	current map[string]string                // worker → its current incarnation, while alive (registered, not stopped or lost)
	owed    map[string]time.Time             // worker → when its current incarnation began to owe (absent: it owes nothing)
	holder  map[string]struct{ w, i string } // execution → the worker and incarnation it is handed to (scheduled or running)
}

func newLeaseModel() *leaseModel {
	return &leaseModel{current: map[string]string{}, owed: map[string]time.Time{}, holder: map[string]struct{ w, i string }{}}
}

func (m *leaseModel) holds(worker, inc string) bool {
	for _, h := range m.holder {
		if h.w == worker && h.i == inc {
			return true
		}
	}
	return false
}

// worker judges an event of worker id's stream at log time at and folds it;
// it returns what is wrong, or "".
func (m *leaseModel) worker(id string, ev domain.Event, at time.Time) string {
	inc, alive := m.current[id]
	own := func(i string) bool { return alive && i == inc }
	switch e := ev.(type) {
	case domain.WorkerRegistered:
		m.current[id] = e.Incarnation
		delete(m.owed, id)
		return ""
	case domain.WorkerLost:
		if !own(e.Incarnation) {
			return ""
		}
		since, owes := m.owed[id]
		delete(m.current, id)
		delete(m.owed, id)
		if e.LeaseMillis <= 0 {
			return "" // forced
		}
		lease := time.Duration(e.LeaseMillis) * time.Millisecond
		switch {
		case !owes:
			return fmt.Sprintf("worker %s incarnation %s declared lost while it owed no sign of life", id, inc)
		case at.Sub(since) < lease:
			return fmt.Sprintf("worker %s incarnation %s declared lost %s into its debt, before its lease of %s", id, inc, at.Sub(since), lease)
		}
		return ""
	case domain.WorkerHeartbeat:
		if !own(e.Incarnation) {
			return ""
		}
	case domain.WorkerDraining:
		if !own(e.Incarnation) {
			return ""
		}
	case domain.WorkerStopped:
		if own(e.Incarnation) {
			delete(m.current, id)
			delete(m.owed, id)
		}
		return ""
	default:
		return ""
	}
	delete(m.owed, id) // paid
	if m.holds(id, inc) {
		m.owed[id] = at
	}
	return ""
}

// execution folds execution id's event ev, after which the execution is x,
// at log time at.
func (m *leaseModel) execution(id string, x *domain.Execution, ev domain.Event, at time.Time) {
	if st := x.Status(); (st == domain.StatusScheduled || st == domain.StatusRunning) && x.Worker() != "" {
		m.holder[id] = struct{ w, i string }{x.Worker(), x.Incarnation()}
	} else {
		delete(m.holder, id)
	}
	if sc, ok := ev.(domain.ExecutionScheduled); ok {
		if inc, alive := m.current[sc.Worker]; alive && inc == sc.Incarnation {
			if _, owes := m.owed[sc.Worker]; !owes {
				m.owed[sc.Worker] = at
			}
		}
	}
}
