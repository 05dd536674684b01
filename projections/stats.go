package projections

// The actions' statistics (queue_stats' totals and wait percentiles) are a
// fold of the log like the rest of State, so that they travel with it:
// into snapshot files and into the log's checkpoints, where the audit's
// checkpoint rule compares them with a fold of the log before the
// checkpoint, and back into a read model started from a checkpoint
// (docs/checkpoints.md).

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/turnstile/turnstile/domain"
)

// waitWindow is how many of an action's most recent slot waits the wait
// percentiles are computed over.
const waitWindow = 1024

// statsRecord is one action's statistics.
type statsRecord struct {
	pos                                  uint64 // position of the last change
	enqueued, granted, completed, failed uint64
	timedOut, rejected, cancelled        uint64
	waits                                []float64 // ring of the last waitWindow waits, ms
	waitNext                             int
	pct                                  waitPercentiles
}

// waitPercentiles caches a record's wait percentiles between two changes
// of its waits: readers of the statistics (under the views' read lock, so
// several at once) compute them once per change instead of sorting a copy
// of the window on every read, which was a third of a busy server's
// allocations. addWait, under the fold's exclusive lock, invalidates it.
type waitPercentiles struct {
	mu       sync.Mutex
	valid    bool
	p50, p95 float64
}

// percentiles returns the 50th and 95th percentiles of the waits (0, 0
// for none).
func (r *statsRecord) percentiles() (p50, p95 float64) {
	if len(r.waits) == 0 {
		return 0, 0
	}
	r.pct.mu.Lock()
	defer r.pct.mu.Unlock()
	if !r.pct.valid {
		sorted := slices.Clone(r.waits)
		slices.Sort(sorted)
		r.pct.p50, r.pct.p95, r.pct.valid = percentile(sorted, 0.50), percentile(sorted, 0.95), true
	}
	return r.pct.p50, r.pct.p95
}

// statsFor returns action ref's statistics, made on first use.
func (s *State) statsFor(ref string) *statsRecord {
	r := s.stats[ref]
	if r == nil {
		r = &statsRecord{}
		s.stats[ref] = r
	}
	return r
}

// countStats folds env (decoded as ev, of stream category cat and id id)
// into the statistics, once the rest of the State has folded it: x is the
// execution the event left (nil: it changed none), fresh whether the event
// made it. An action's statistics change with every event of its action
// and queue streams (their position only) and every event of its
// executions but with_items parents', until they end: a request admitted
// to a queue or deferred is enqueued; a slot granted is counted with its
// wait since the request; each end is counted by its kind.
func (s *State) countStats(env *domain.Envelope, ev domain.Event, cat, id string, x *domain.Execution, fresh bool) {
	switch cat {
	case domain.StreamAction, domain.StreamQueue:
		s.statsFor(id).pos = env.Position
		return
	case domain.StreamExecution:
	default:
		return
	}
	if x == nil {
		return // an event after the end, or of an execution never requested: nothing counts
	}
	if req, ok := ev.(domain.ExecutionRequested); ok && fresh {
		_, _, _, queued := s.Queues.Locate(id)
		if _, deferred := s.Deferred[id]; queued || deferred { // (deferred: admitted, not due yet)
			s.statsFor(req.Action).enqueued++
		}
	}
	if x.IsParent() {
		return // a with_items parent takes no slot; its children count
	}
	r := s.statsFor(x.Action())
	r.pos = env.Position
	switch ev.(type) {
	case domain.ExecutionScheduling:
		r.granted++
		if at := x.RequestedAt(); !at.IsZero() {
			r.addWait(float64(env.Time.Sub(at)) / float64(time.Millisecond))
		}
	case domain.ExecutionCompleted:
		r.completed++
	case domain.ExecutionFailed:
		r.failed++
	case domain.ExecutionTimedOut:
		r.timedOut++
	case domain.ExecutionRejected:
		r.rejected++
	case domain.ExecutionCancelled:
		r.cancelled++
	}
}

func (r *statsRecord) addWait(ms float64) {
	if ms < 0 {
		ms = 0
	}
	r.pct.valid = false
	if len(r.waits) < waitWindow {
		r.waits = append(r.waits, ms)
	} else {
		r.waits[r.waitNext] = ms
		r.waitNext = (r.waitNext + 1) % waitWindow
	}
}

// percentile returns the nearest-rank q-th percentile (0 < q ≤ 1) of sorted.
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// snapshotStats returns the statistics as a snapshot keeps them, by ref.
func (s *State) snapshotStats() []StatsSnapshot {
	out := make([]StatsSnapshot, 0, len(s.stats))
	for _, ref := range slices.Sorted(maps.Keys(s.stats)) {
		r := s.stats[ref]
		out = append(out, StatsSnapshot{Ref: ref, Position: r.pos, Enqueued: r.enqueued,
			Granted: r.granted, Completed: r.completed, Failed: r.failed, TimedOut: r.timedOut,
			Rejected: r.rejected, Cancelled: r.cancelled, Waits: slices.Clone(r.waits), WaitNext: r.waitNext})
	}
	return out
}

// restoreStats sets the statistics a snapshot kept.
func (s *State) restoreStats(stats []StatsSnapshot) {
	s.stats = make(map[string]*statsRecord, len(stats))
	for _, r := range stats {
		s.stats[r.Ref] = &statsRecord{pos: r.Position, enqueued: r.Enqueued, granted: r.Granted,
			completed: r.Completed, failed: r.Failed, timedOut: r.TimedOut, rejected: r.Rejected,
			cancelled: r.Cancelled, waits: slices.Clone(r.Waits), waitNext: r.WaitNext}
	}
}

// StatsFrom returns the position the statistics count from: 0 for a fold
// of the whole log; for a fold resumed from a snapshot or checkpoint of a
// build that kept no statistics in it, that snapshot's position (what came
// before it is not counted).
func (s *State) StatsFrom() uint64 { return s.statsFrom }

// statsFrom is sn's StatsFrom: where a snapshot of a build that kept no
// statistics (StatsKept false) begins them.
func (sn *StateSnapshot) statsFrom() uint64 {
	if !sn.StatsKept {
		return sn.Next
	}
	return sn.StatsFrom
}
