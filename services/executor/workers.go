// Free workers: a handoff goes only to a live incarnation with a free slot
// that runs the action's runner, counting the handoffs this executor wrote
// that the fold does not show yet, and never to a worker whose lost verdict
// is being written or may already be in the log.
//
// A handoff whose append failed with an unknown outcome that could not be
// read back keeps its slot (it may have landed), but only for its own
// execution: once that append is over, the fold decides that execution again
// (the same fences and event ids, so a landed twin wins or replays), and the
// new decision may take the slot the first one holds. Without that, a worker
// whose every slot is held so stays full forever whenever it is the only one
// that runs the action's runner: the executions that would resolve the doubt
// are never decided again.
//
// Writes nothing: grant.go and attention.go choose their workers here.

package executor

import (
	"slices"

	"github.com/turnstile/turnstile/domain"
)

type freeWorker struct {
	id, incarnation string
	free            int
	runners         []string        // the fold's (shared, read only); empty: runs everything
	runnerSet       map[string]bool // runners as a set, built on first use when there are many
	// own holds the executions whose handoff to this worker has an unknown
	// outcome (its append is over, the fold does not show it): each holds
	// one slot not counted in free, which only its own re-decision may take.
	own map[string]bool
}

// freeWorkers returns the workers with free slots: those the fold shows,
// less the handoffs to them that this executor has written (or is writing)
// and the fold does not show yet. A worker with no free slot is listed too
// if one of its slots is held by a handoff of unknown outcome (see own).
func (e *Executor) freeWorkers() []*freeWorker {
	var inHand map[string]int
	var own map[string]map[string]bool
	for xs, h := range e.handing {
		_, xid := domain.SplitStream(xs)
		if w := e.state.Workers[h.worker]; w != nil && e.state.IsLive(xid) {
			if _, folded := w.InFlight[xid]; !folded {
				if _, writing := e.awaiting[xs]; !writing {
					// Its append is over and its outcome unknown.
					if own == nil {
						own = map[string]map[string]bool{}
					}
					if own[h.worker] == nil {
						own[h.worker] = map[string]bool{}
					}
					own[h.worker][xid] = true
					continue
				}
				if inHand == nil {
					inHand = map[string]int{}
				}
				inHand[h.worker]++
			}
		}
	}
	var out []*freeWorker
	for _, id := range e.state.WorkerIDs() {
		w := e.state.Workers[id]
		if !w.Accepting() {
			continue
		}
		if len(e.awaiting) > 0 || len(e.doubted) > 0 { // (no stream name built per worker and cycle otherwise)
			if ws := domain.WorkerStream(id); e.busy(ws) {
				continue // its lost verdict is being written
			} else if _, ok := e.doubted[ws]; ok {
				continue // its lost verdict may be in the log
			}
		}
		// The slots held by handoffs of unknown outcome come off first; what
		// is left is free for any execution.
		n := w.Free() - inHand[id] - len(own[id])
		held := own[id]
		if n < 0 {
			// More in hand than the fold leaves free (a slot freed in the
			// fold since): the doubtful ones keep what there is.
			held = trim(held, len(own[id])+n)
			n = 0
		}
		if n > 0 || len(held) > 0 {
			out = append(out, &freeWorker{id: id, incarnation: w.Incarnation(), free: n, own: held, runners: w.Runners()})
		}
	}
	return out
}

// trim returns at most n of set's keys, the smallest first (deterministic).
func trim(set map[string]bool, n int) map[string]bool {
	if n <= 0 {
		return nil
	}
	if len(set) <= n {
		return set
	}
	keys := sortedKeys(set)
	out := make(map[string]bool, n)
	for _, k := range keys[:n] {
		out[k] = true
	}
	return out
}

// slots returns the slots ws offer: free ones and those held for their own
// executions.
func slots(ws []*freeWorker) (n int) {
	for _, w := range ws {
		n += w.free + len(w.own)
	}
	return n
}

// take records that the worker is handed execution xid: the slot held for
// it, if any, else a free one.
func (w *freeWorker) take(xid string) {
	if w.own[xid] {
		delete(w.own, xid)
		return
	}
	w.free--
}

// pickWorker returns the worker that runs runner and holds a slot for
// execution xid (a handoff of unknown outcome: deciding it again on the
// same worker makes a landed twin an exact replay), else the one with the
// most free slots.
func pickWorker(ws []*freeWorker, runner, xid string) *freeWorker {
	return pickWorkerBut(ws, runner, xid, "")
}

// pickWorkerBut is pickWorker leaving out worker not.
func pickWorkerBut(ws []*freeWorker, runner, xid, not string) *freeWorker {
	var best *freeWorker
	for _, w := range ws {
		if w.id == not || !w.serves(runner) {
			continue
		}
		if w.own[xid] {
			return w
		}
		if w.free <= 0 {
			continue
		}
		if best == nil || w.free > best.free {
			best = w
		}
	}
	return best
}

// serves reports whether w runs runner. A worker with many runners gets a
// set on first use; most have a few, scanned in place.
func (w *freeWorker) serves(runner string) bool {
	switch {
	case len(w.runners) == 0:
		return true
	case len(w.runners) <= 16:
		return slices.Contains(w.runners, runner)
	}
	if w.runnerSet == nil {
		w.runnerSet = make(map[string]bool, len(w.runners))
		for _, r := range w.runners {
			w.runnerSet[r] = true
		}
	}
	return w.runnerSet[runner]
}
