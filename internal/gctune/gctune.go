// Package gctune sets the garbage collector's target for turnstile's
// processes from their live heap. Go's default (GOGC=100: collect when the
// heap reaches twice the live heap) makes a process whose live heap is small
// but whose allocation rate is high, as a busy executor's is, spend a
// quarter of its CPU collecting. Tune lets the heap grow to up to five times
// the live heap while that stays within a budget, and never collects more
// often than Go's default: at a live heap of half the budget or more, it is
// GOGC=100 again. It leaves the collector alone when GOGC is set.
package gctune

import (
	"context"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Settings of Tune.
const (
	// DefaultBudget is the heap Tune aims to stay within when GOMEMLIMIT is
	// not set (with it, the budget is GOMEMLIMIT).
	DefaultBudget = 1 << 30
	// MaxPercent is the highest GOGC Tune sets.
	MaxPercent = 400
	// MinPercent is the lowest: Go's default.
	MinPercent = 100
	// Every is how often Tune looks at the live heap.
	Every = 250 * time.Millisecond
)

// Percent returns the GOGC for a live heap of live bytes and a budget: the
// growth that keeps the heap's goal (live × (1 + GOGC/100)) within budget,
// between MinPercent and MaxPercent.
func Percent(live, budget uint64) int {
	if live == 0 {
		return MaxPercent
	}
	if budget <= live {
		return MinPercent
	}
	p := float64(budget-live) / float64(live) * 100
	return int(math.Max(MinPercent, math.Min(MaxPercent, p)))
}

// Tune adjusts GOGC every Every from the live heap until ctx ends, unless
// the GOGC environment variable is set (then it returns at once). The
// budget is GOMEMLIMIT if set, else DefaultBudget.
func Tune(ctx context.Context) {
	if os.Getenv("GOGC") != "" {
		return
	}
	budget := uint64(DefaultBudget)
	if limit := debug.SetMemoryLimit(-1); limit > 0 && limit < math.MaxInt64 {
		budget = uint64(limit)
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	set := -1
	tick := time.NewTicker(Every)
	defer tick.Stop()
	for {
		metrics.Read(sample)
		live := uint64(0)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			live = sample[0].Value.Uint64()
		}
		if p := Percent(live, budget); p != set {
			debug.SetGCPercent(p)
			set = p
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
