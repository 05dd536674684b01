// One decision cycle: the rules in the order they are decided (announced
// changes, rejections, then on a timed cycle leases and queue timeouts,
// expiries and take-backs, executions needing attention, with_items parents,
// grants), each bounded by Config.MaxBatch; and the pacing of repairs, which
// complete another writer's partial write only after two timed cycles.

package executor

import (
	"sort"
)

// Decision is one decision the executor took on its fold: one atomic
// append, or on a store without atomic multi-stream appends, its appends
// one stream at a time, the fence first. Commit appends it.
type Decision struct{ o op }

// What describes the decision, such as "grant demo.sleep" or "expire <id>".
func (d Decision) What() string { return d.o.what }

// DecideAtStart returns what to write once the fold has caught up with the
// log as it was at start, before deciding anything else: with
// LoseWorkersAtStart, the lost verdicts of the previous run's workers.
func (e *Executor) DecideAtStart() []Decision {
	e.mu.Lock()
	defer e.mu.Unlock()
	return wrap(e.decideLostAtStart(nil))
}

// Decide returns one cycle's decisions on the fold as it is now; timed adds
// the rules that depend on the clock alone (worker leases, queue timeouts,
// handoff expiries). The streams a decision writes stay untouched by later
// decisions until the fold shows its events or Commit reports its failure,
// so the decisions of one cycle may be committed in any order.
func (e *Executor) Decide(timed bool) []Decision {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.cfg.Clock.Now()
	e.sweep++
	if timed {
		e.timedSweeps++
	}
	var ops []op
	ops = e.decideAnnounced(ops)
	ops = e.decideRejections(ops)
	if timed {
		ops = e.decideLeases(ops, now)
		ops = e.decideQueueTimeouts(ops, now)
		ops = e.decideRequeues(ops, now)
		ops = e.decideSchedules(ops, now)
	}
	ops = e.decideExpiries(ops, now, timed)
	if len(e.state.Attention) > 0 {
		attention := sortedKeys(e.state.Attention)
		ops = e.decideAttention(ops, attention)
		ops = e.decideParents(ops, attention)
	}
	if timed {
		ops = e.decideCancelInProgress(ops)
	}
	ops = e.decideGrants(ops, now)
	for k, p := range e.pending { // forget partial writes the fold no longer shows
		if p.touched != e.sweep {
			delete(e.pending, k)
		}
	}
	return wrap(ops)
}

func wrap(ops []op) []Decision {
	out := make([]Decision, len(ops))
	for i := range ops {
		out[i] = Decision{ops[i]}
	}
	return out
}

// seen is how long a partial write has been in the fold.
type seen struct {
	since   int64 // timedSweeps when first seen
	touched int64 // the decision generation that last saw it
}

// ripe reports whether the partial write key has been in the fold for two
// timed cycles, so that its writer (another executor, or the API, still at
// work) had time to finish it before this executor completes it.
func (e *Executor) ripe(key string) bool {
	now := e.timedSweeps
	p := e.pending[key]
	if p == nil {
		p = &seen{since: now}
		e.pending[key] = p
	}
	p.touched = e.sweep
	return now >= p.since+2
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
