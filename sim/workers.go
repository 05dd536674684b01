// The simulated workers' steps: restarts, delivery of handoffs, runs and
// heartbeats, each on the worker's own (possibly skewed) clock.

package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/services/runner"
	"github.com/turnstile/turnstile/services/worker"
)

// local is worker sw's own clock.
func (w *world) local(sw *simWorker) time.Time { return w.now.Add(sw.skew) }

// localClock is worker sw's own clock as a clock.Clock.
type localClock struct {
	w  *world
	sw *simWorker
}

func (c localClock) Now() time.Time { return c.w.local(c.sw) }

func (w *world) pickWorker(ok func(*simWorker) bool) *simWorker {
	var c []*simWorker
	for _, sw := range w.workers {
		if sw.w != nil && !w.now.Before(sw.stalled) && ok(sw) {
			c = append(c, sw)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[w.rng.IntN(len(c))]
}

func (w *world) workerRestart() {
	var c []*simWorker
	for _, sw := range w.workers {
		if sw.w == nil && !w.now.Before(sw.restartAt) {
			c = append(c, sw)
		}
	}
	if len(c) == 0 {
		return
	}
	sw := c[w.rng.IntN(len(c))]
	ww, err := worker.New(worker.Config{ID: sw.id, Slots: sw.slots, Store: w.writeTo, Runners: sw.runrs, Logger: w.log,
		Host: "sim", PID: 1, Clock: localClock{w, sw}, NewIncarnation: func() string { w.incSeq++; return fmt.Sprintf("inc-%d", w.incSeq) }})
	if err != nil {
		panic(err)
	}
	// Start subscribes, then registers (retrying while the log is unavailable).
	if err := ww.Register(w.ctx); err != nil {
		w.tracef("worker %s cannot register: %v", sw.id, err)
		return // it tries again at a later step
	}
	sw.w, sw.inbox, sw.runs = ww, nil, nil
	sw.nextBeat = w.local(sw).Add(heartbeatEvery)
	w.tracef("worker %s registers %s", sw.id, ww.Incarnation())
}

func (w *world) deliver() {
	sw := w.pickWorker(func(sw *simWorker) bool { return len(sw.inbox) > 0 })
	if sw == nil {
		return
	}
	i := w.rng.IntN(len(sw.inbox)) // messages arrive in any order
	env := sw.inbox[i]
	sw.inbox = append(sw.inbox[:i], sw.inbox[i+1:]...)
	if env.Type == domain.TypeExecutionCancelRequested {
		sw.w.Cancel(env)
		return
	}
	r, err := sw.w.AcceptHandoff(env)
	if err != nil || r == nil {
		return
	}
	run := &simRun{r: r, fail: w.chance(0.15)}
	switch u := w.rng.Float64(); {
	case u < 0.5:
		run.work = w.between(0, 2*time.Second)
	case u < 0.92:
		run.work = w.between(2*time.Second, 10*time.Second)
	default:
		run.work = w.between(10*time.Second, 60*time.Second) // some pass the timeout
	}
	sw.runs = append(sw.runs, run)
	w.tracef("worker %s takes %s attempt %d", sw.id, short(r.Execution()), r.Attempt())
}

// runnable returns a run of sw that can take a step now, or nil.
func (w *world) runnable(sw *simWorker) *simRun {
	for _, run := range sw.runs {
		if !run.begun || run.settled || run.r.Context().Err() != nil || !w.local(sw).Before(run.start.Add(min(run.work, runTimeout))) {
			return run
		}
	}
	return nil
}

func (w *world) runStep() error {
	sw := w.pickWorker(func(sw *simWorker) bool { return w.runnable(sw) != nil })
	if sw == nil {
		return nil
	}
	run := w.runnable(sw)
	done := func() {
		run.r.Close()
		for i, r := range sw.runs {
			if r == run {
				sw.runs = append(sw.runs[:i], sw.runs[i+1:]...)
				break
			}
		}
	}
	id := short(run.r.Execution())
	if !run.begun {
		started, err := run.r.Begin(w.ctx)
		if err != nil {
			w.res.WorkerWritesRetried++
			w.tracef("worker %s start of %s: %v (tries again)", sw.id, id, err)
			return nil
		}
		if !started {
			w.tracef("worker %s does not start %s", sw.id, id)
			done()
			return nil
		}
		run.begun, run.start = true, w.local(sw)
		w.tracef("worker %s starts %s", sw.id, id)
		return nil
	}
	if !run.settled {
		run.settled = true
		switch {
		case run.r.Context().Err() != nil:
			run.runErr = &runner.Interrupted{Err: run.r.Context().Err(), Result: json.RawMessage(`{"partial":true}`)}
		case run.work >= runTimeout:
			run.runErr = context.DeadlineExceeded
		case run.fail:
			run.runErr = &runner.Failure{Message: "simulated failure"}
		default:
			run.result = json.RawMessage(fmt.Sprintf(`{"worked_ms":%d}`, run.work.Milliseconds()))
		}
	}
	if err := run.r.End(w.ctx, run.result, run.runErr); err != nil {
		w.res.WorkerWritesRetried++
		w.tracef("worker %s end of %s: %v (tries again)", sw.id, id, err)
		return nil
	}
	w.tracef("worker %s ends %s", sw.id, id)
	done()
	return nil
}

// heartbeat lets a worker look at its lease: it writes a heartbeat if it
// owes one (worker.Config.MarkEvery), else it reads its stream.
func (w *world) heartbeat() {
	sw := w.pickWorker(func(sw *simWorker) bool { return !w.local(sw).Before(sw.nextBeat) })
	if sw == nil {
		return
	}
	inc := sw.w.Incarnation()
	_ = sw.w.Heartbeat(w.ctx) // a failed one is simply late; a refused one re-registers
	sw.nextBeat = w.local(sw).Add(heartbeatEvery)
	if now := sw.w.Incarnation(); now != inc {
		w.tracef("worker %s learns %s was replaced; now %s", sw.id, inc, now)
	}
}

// ---- checks ----
