// Cycles in flight: the loop appends each cycle's decisions in the
// background and goes on folding and deciding, at most maxCyclesInFlight
// cycles at once; a timed cycle counts (Stats.TimedCycles) only once it and
// every cycle before it have been appended or refused. Owned by the loop;
// run is the same, waited for, for the decisions at start.

package executor

import (
	"context"
	"sync"

	"github.com/turnstile/turnstile/internal/gopool"
)

// maxCyclesInFlight bounds the decision cycles whose appends are under way
// at once; at the bound the loop folds without deciding until one lands.
const maxCyclesInFlight = 8

// flight is the loop's record of the decision cycles whose appends are
// under way, oldest first.
type flight struct {
	cycles       []*cycle
	results      chan opResult
	writers      *gopool.Pool // the goroutines that append them (kept: each grew its stack)
	timedWaiting bool         // a timed cycle is owed (it was due at the bound)
}

// cycle is one Decide's decisions, appended in the background.
type cycle struct {
	timed bool
	left  int // appends not yet settled
}

// opResult is the outcome of one decision's appends.
type opResult struct {
	c      *cycle
	d      *Decision
	w      written
	landed map[string]bool
}

// runAsync appends a cycle's decisions concurrently in the background (the
// store commits them together); each outcome comes back to the loop on
// fl.results. The streams they write stay awaited meanwhile, so the loop's
// later decisions leave them alone: decisions of successive cycles are as
// independent as those of one cycle, which Decide already allows to commit
// in any order.
func (e *Executor) runAsync(ctx context.Context, fl *flight, ds []Decision, timed bool) {
	if len(ds) == 0 && !timed {
		return
	}
	c := &cycle{timed: timed, left: len(ds)}
	fl.cycles = append(fl.cycles, c)
	if len(ds) == 0 {
		e.retire(fl)
		return
	}
	for i := range ds {
		d := &ds[i]
		fl.writers.Go(func() {
			if e.beforeAppend != nil {
				e.beforeAppend(d.o.what)
			}
			w := e.write(ctx, &d.o)
			if w.err == nil {
				crashAfter(&d.o)
			}
			fl.results <- opResult{c: c, d: d, w: w, landed: e.landed(ctx, &d.o, w)}
		})
	}
}

// settled records one decision's outcome and reports whether it failed
// (its streams are free again, so deciding again may help).
func (e *Executor) settled(ctx context.Context, fl *flight, r opResult) bool {
	e.mu.Lock()
	e.settle(ctx, &r.d.o, r.w, r.landed)
	e.mu.Unlock()
	r.c.left--
	e.retire(fl)
	return r.w.err != nil
}

// retire drops the cycles at the front of fl that have landed, counting the
// timed ones: a timed cycle counts once it and every cycle before it have
// been appended (or refused).
func (e *Executor) retire(fl *flight) {
	for len(fl.cycles) > 0 && fl.cycles[0].left == 0 {
		if fl.cycles[0].timed {
			e.Stats.TimedCycles.Add(1)
		}
		fl.cycles[0] = nil
		fl.cycles = fl.cycles[1:]
	}
}

// land waits for every append under way and records its outcome.
func (e *Executor) land(ctx context.Context, fl *flight) {
	for len(fl.cycles) > 0 {
		e.settled(ctx, fl, <-fl.results)
	}
}

// run appends the decisions concurrently (the store commits them together)
// and waits for all.
func (e *Executor) run(ctx context.Context, ds []Decision) {
	if len(ds) == 0 {
		return
	}
	res := make([]written, len(ds))
	var wg sync.WaitGroup
	for i := range ds {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if e.beforeAppend != nil {
				e.beforeAppend(ds[i].o.what)
			}
			res[i] = e.write(ctx, &ds[i].o)
			if res[i].err == nil {
				crashAfter(&ds[i].o)
			}
		}(i)
	}
	wg.Wait()
	landed := make([]map[string]bool, len(ds))
	for i, w := range res {
		landed[i] = e.landed(ctx, &ds[i].o, w)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, w := range res {
		e.settle(ctx, &ds[i].o, w, landed[i])
	}
}
