// The audit's lease rule: a worker.lost verdict judged by the lease comes
// only once the incarnation owed the log a sign of life (it held
// executions, or was handed one since its last event on its stream) for at
// least the lease the verdict records, by log time. It is the same fold the
// executor decides on (domain.Worker.Owe, called as projections.State
// calls it), so a worker declared lost while it wrote in time, or while it
// owed nothing (an idle worker writes nothing), is a violation.

package projections

import (
	"time"

	"github.com/turnstile/turnstile/domain"
)

// auditLeases folds the workers and what each holds, for the lease rule.
type auditLeases struct {
	workers map[string]*domain.Worker
	held    map[string]map[string]*domain.Execution // worker → live executions handed to it
}

func newAuditLeases() *auditLeases {
	return &auditLeases{workers: map[string]*domain.Worker{}, held: map[string]map[string]*domain.Execution{}}
}

func (a *auditLeases) worker(id string) *domain.Worker {
	w := a.workers[id]
	if w == nil {
		w = domain.NewWorker(id)
		a.workers[id] = w
	}
	return w
}

// checkWorker judges an event of worker id's stream at log time at, on the
// state before it ("" if it is lawful), then folds it.
func (a *auditLeases) checkWorker(id string, ev domain.Event, version uint64, at time.Time) string {
	w := a.worker(id)
	detail := ""
	if l, ok := ev.(domain.WorkerLost); ok {
		detail = w.CheckLost(l, at)
	}
	w.Apply(ev, version, at)
	if a.holdsCurrent(id, w) {
		w.Owe(w.Incarnation(), at)
	}
	return detail
}

func (a *auditLeases) holdsCurrent(id string, w *domain.Worker) bool {
	for _, x := range a.held[id] {
		if x.Incarnation() == w.Incarnation() {
			return true
		}
	}
	return false
}

// execution folds execution x (id) after ev was applied to it at log time
// at; prevWorker and prevStatus are x's before ev.
func (a *auditLeases) execution(id string, x *domain.Execution, prevWorker string, prevStatus domain.Status, ev domain.Event, at time.Time) {
	held := func(st domain.Status) bool { return st == domain.StatusScheduled || st == domain.StatusRunning }
	if held(prevStatus) && (!held(x.Status()) || prevWorker != x.Worker()) {
		delete(a.held[prevWorker], id)
	}
	if held(x.Status()) && x.Worker() != "" {
		if a.held[x.Worker()] == nil {
			a.held[x.Worker()] = map[string]*domain.Execution{}
		}
		a.held[x.Worker()][id] = x
	}
	if sc, ok := ev.(domain.ExecutionScheduled); ok {
		a.worker(sc.Worker).Owe(sc.Incarnation, at)
	}
}
