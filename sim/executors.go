// The simulated executors' steps: starts (and fail-overs), folding the
// log, deciding, committing, and the forwarder that carries handoffs.

package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/services/executor"
)

// startExecutor starts an executor: again under the last name (a restart),
// or under a new one (a fail-over, or with another running, a split brain).
func (w *world) startExecutor(newName bool) {
	if newName || w.execSeq == 0 {
		w.execSeq++
	}
	name := fmt.Sprintf("exec-%d", w.execSeq)
	for _, x := range w.execs {
		if x.name == name { // never two live instances of one name
			w.execSeq++
			name = fmt.Sprintf("exec-%d", w.execSeq)
		}
	}
	e, err := executor.New(executor.Config{Store: w.writeTo, Clock: clockFunc(func() time.Time { return w.now }), Logger: w.log,
		Name: name, WorkerLease: workerLease})
	if err != nil {
		panic(err) // the configuration is ours
	}
	w.execs = append(w.execs, &simExec{e: e, name: name})
	w.started = append(w.started, e)
	w.tracef("executor %s starts", name)
}

type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

func (w *world) pickExec(ok func(*simExec) bool) *simExec {
	var c []*simExec
	for _, x := range w.execs {
		if ok(x) {
			c = append(c, x)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[w.rng.IntN(len(c))]
}

func (w *world) execFold() {
	x := w.pickExec(func(x *simExec) bool {
		return (len(x.pending) == 0 || x.ready) && (!x.started || x.e.Position() < w.checker.next)
	})
	if x == nil {
		return
	}
	if !x.started { // Start reads the head first, and retries until it can
		head, err := w.store.Head(w.ctx)
		if err != nil {
			return
		}
		if ok, err := w.startFromCheckpoint(x); !ok || err != nil {
			if err != nil {
				panic(err) // (a checkpoint is always there: the log is trimmed at one)
			}
			return
		}
		x.head, x.started = head, true
		x.ready = head == 0
	}
	evs, err := w.store.ReadAll(w.ctx, x.e.Position(), 1+w.rng.IntN(128))
	if err != nil {
		return // the subscription failed: it resumes from the same position
	}
	switch w.cfg.Bug {
	case BugOverGrant:
		overGrant(evs)
	case BugEarlyRequeue:
		noBackoff(evs)
	case BugIgnorePriority:
		noPriority(evs)
	case BugIgnoreTotal:
		noTotal(evs)
	case BugTickTwice:
		noTicks(evs)
	}
	x.e.Fold(evs)
}

func (w *world) execDecide() {
	x := w.pickExec(func(x *simExec) bool {
		return (len(x.pending) == 0 || x.ready) && x.started && (x.ready || x.e.Position() >= x.head)
	})
	if x == nil {
		return
	}
	if !x.ready {
		x.pending = x.e.DecideAtStart()
		x.ready = true
		return
	}
	ds := x.e.Decide(w.chance(0.3))
	x.pending = append(x.pending, ds...)
	if len(ds) > 0 {
		w.tracef("executor %s decides %d (%d pending)", x.name, len(ds), len(x.pending))
	}
}

func (w *world) execCommit() {
	x := w.pickExec(func(x *simExec) bool { return len(x.pending) > 0 })
	if x == nil {
		return
	}
	i := w.rng.IntN(len(x.pending))
	d := x.pending[i]
	x.pending = append(x.pending[:i], x.pending[i+1:]...)
	err := x.e.Commit(w.ctx, d)
	if err == nil {
		w.res.DecisionsCommitted++
	}
	w.tracef("executor %s commits %s: %v", x.name, d.What(), err)
}

// ---- the bus ----

// forward is the forwarder: it reads the log from its position and
// publishes handoffs to their worker and cancellation requests to every
// worker. A message to a worker that is down is lost, as on an in-process
// bus; a few others are lost or sent twice.
func (w *world) forward() {
	evs, err := w.store.ReadAll(w.ctx, w.fwdPos, 1+w.rng.IntN(32))
	if te := (*eventstore.TrimmedError)(nil); errors.As(err, &te) {
		w.tracef("forwarder: position %d was archived; it resumes at the live log's start %d", w.fwdPos, te.First)
		w.fwdPos = te.First // as the forwarder does (services/bus)
		return
	}
	if err != nil || len(evs) == 0 {
		return
	}
	w.fwdPos = evs[len(evs)-1].Position + 1
	for i := range evs {
		env := evs[i]
		var to []*simWorker
		switch env.Type {
		case domain.TypeExecutionScheduled:
			ev, err := codec.Events.Decode(&env)
			if err != nil {
				continue
			}
			for _, sw := range w.workers {
				if sw.id == ev.(domain.ExecutionScheduled).Worker {
					to = append(to, sw)
				}
			}
		case domain.TypeExecutionCancelRequested:
			to = w.workers
		default:
			continue
		}
		for _, sw := range to {
			if sw.w == nil {
				continue
			}
			if !w.healing && w.chance(0.03) {
				w.res.LostMessages++
				w.tracef("bus loses %s for %s", env.Type, sw.id)
				continue
			}
			sw.inbox = append(sw.inbox, env)
			if !w.healing && w.chance(0.05) {
				w.res.DuplicateMessages++
				sw.inbox = append(sw.inbox, env)
			}
		}
	}
	if w.chance(0.3) {
		w.fwdCheckpoint = w.fwdPos
	}
}

// ---- workers ----
