// Free workers: a handoff goes only to a live incarnation with a free slot
// that runs the action's runner, counting the handoffs this executor wrote
// that the fold does not show yet, and never to a worker whose lost verdict
// is being written or may already be in the log.
//
// Writes nothing: grant.go and attention.go choose their workers here.

package executor

import (
	"github.com/turnstile/turnstile/domain"
)

type freeWorker struct {
	id, incarnation string
	free            int
	runners         map[string]bool // nil: runs everything
}

// freeWorkers returns the workers with free slots: those the fold shows,
// less the handoffs to them that this executor has written (or is writing)
// and the fold does not show yet.
func (e *Executor) freeWorkers() []*freeWorker {
	var inHand map[string]int
	for xs, h := range e.handing {
		_, xid := domain.SplitStream(xs)
		if w := e.state.Workers[h.worker]; w != nil && e.state.IsLive(xid) {
			if _, folded := w.InFlight[xid]; !folded {
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
		if ws := domain.WorkerStream(id); e.busy(ws) {
			continue // its lost verdict is being written
		} else if _, ok := e.doubted[ws]; ok {
			continue // its lost verdict may be in the log
		}
		if n := w.Free() - inHand[id]; n > 0 {
			fw := &freeWorker{id: id, incarnation: w.Incarnation(), free: n}
			if rs := w.Runners(); len(rs) > 0 {
				fw.runners = map[string]bool{}
				for _, r := range rs {
					fw.runners[r] = true
				}
			}
			out = append(out, fw)
		}
	}
	return out
}

// pickWorker returns the worker with the most free slots that runs runner.
func pickWorker(ws []*freeWorker, runner string) *freeWorker { return pickWorkerBut(ws, runner, "") }

// pickWorkerBut is pickWorker leaving out worker not.
func pickWorkerBut(ws []*freeWorker, runner, not string) *freeWorker {
	var best *freeWorker
	for _, w := range ws {
		if w.free <= 0 || w.id == not || (w.runners != nil && !w.runners[runner]) {
			continue
		}
		if best == nil || w.free > best.free {
			best = w
		}
	}
	return best
}
