// Package gctune sets the garbage collector's target for turnstile's
// processes from their live heap. Go's default (GOGC=100: collect when the
// heap reaches twice the live heap) makes a process whose live heap is small
// but whose allocation rate is high, as a busy executor's is, spend a
// quarter of its CPU collecting. Tune lets the heap grow to up to five times
// the live heap while that stays within a budget, and never collects more
// often than Go's default: at a live heap of half the budget or more, it is
// GOGC=100 again. The growth is only granted where it buys something: it is
// what the process allocates in an Interval (at the lower of its rates over
// the last Interval and the last RateWindow), so a process that allocates little
// (an idle server) keeps Go's default and an RSS near twice its live heap,
// instead of five times it. It leaves the collector alone when GOGC is set.
package gctune

import (
	"context"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
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
	// Every is how often Tune looks at the live heap and the allocations.
	Every = 250 * time.Millisecond
	// Interval is the least time between two collections that a larger
	// target is granted for: the heap grows by at most what the process
	// allocated in the last Interval. (Not at the highest rate seen in it:
	// a burst of a quarter second, a checkpoint's encoding, would then
	// raise the target five seconds long, and the resident memory would
	// follow the bursts rather than the load.)
	Interval = 5 * time.Second
	// RateWindow is the longer span the rate is also taken over: the rate
	// is the lower of the last Interval's and the last RateWindow's, so a
	// burst (an archive round allocates some 40 MB in a second or two)
	// raises the target by a sixth of itself rather than all of it, while a
	// process that stops allocating falls back to Go's default within an
	// Interval.
	RateWindow = 30 * time.Second
	// ReleaseEvery is the least time between two Releases that return
	// memory.
	ReleaseEvery = 30 * time.Second
	// Slack is how much more heap than its goal, in percent of the goal,
	// the runtime may keep from the system before Tune returns it
	// (Release). The runtime's own scavenger gives back what exceeds about
	// a tenth over the goal, slowly and only down to the goal of the last
	// collection, so after each burst (an archive round, a checkpoint) the
	// resident memory stayed at the burst's height and crept up over an
	// hour's run.
	Slack = 10
)

// Percent returns the GOGC for a live heap of live bytes, a budget, and an
// allocation rate of rate bytes a second: the growth the process allocates in
// Interval, bounded so that the heap's goal (live × (1 + GOGC/100)) stays
// within budget, between MinPercent and MaxPercent.
func Percent(live, budget uint64, rate float64) int {
	if budget <= live {
		return MinPercent
	}
	if live == 0 {
		live = 1
	}
	p := math.Min(float64(budget-live)/float64(live)*100, rate*Interval.Seconds()/float64(live)*100)
	return int(math.Max(MinPercent, math.Min(MaxPercent, p)))
}

// Tune adjusts GOGC every Every from the live heap until ctx ends, unless
// the GOGC environment variable is set (then it returns at once). The
// budget is GOMEMLIMIT if set, else DefaultBudget. When the heap the
// runtime keeps (in use, or free and not yet returned) exceeds its goal by
// more than Slack percent, it returns the free part (Release, at most every
// ReleaseEvery).
func Tune(ctx context.Context) {
	if os.Getenv("GOGC") != "" {
		return
	}
	budget := uint64(DefaultBudget)
	if limit := debug.SetMemoryLimit(-1); limit > 0 && limit < math.MaxInt64 {
		budget = uint64(limit)
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/heap/goal:bytes"}, {Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"}, {Name: "/memory/classes/heap/free:bytes"}}
	read := func(i int) uint64 {
		if sample[i].Value.Kind() == metrics.KindUint64 {
			return sample[i].Value.Uint64()
		}
		return 0
	}
	set := -1
	tick := time.NewTicker(Every)
	defer tick.Stop()
	metrics.Read(sample)
	r := newRates(mark{read(1), time.Now()})
	for {
		metrics.Read(sample)
		rate := r.add(mark{read(1), time.Now()})
		if p := Percent(read(0), budget, rate); p != set {
			debug.SetGCPercent(p)
			set = p
		}
		if retained := read(3) + read(4) + read(5); retained > read(2)/100*(100+Slack) {
			Release()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// A mark is the allocation counter at a time.
type mark struct {
	allocs uint64
	at     time.Time
}

// rates keeps the marks of the last RateWindow, one per Every.
type rates struct {
	ring []mark // the mark of tick i at ring[i%len(ring)]
	n    int    // marks added
}

func newRates(start mark) *rates {
	r := &rates{ring: make([]mark, int(RateWindow/Every))}
	r.ring[0], r.n = start, 1
	return r
}

// add records now and returns the allocation rate in bytes a second: the
// lower of the rates since the mark Interval ago and since the oldest
// mark kept (RateWindow ago; the first mark before the ring fills, so that
// a process starts with its rate rather than a fraction of it).
func (r *rates) add(now mark) float64 {
	since := func(back int) mark {
		if back >= r.n {
			back = r.n - 1
		}
		return r.ring[(r.n-1-back)%len(r.ring)]
	}
	rate := func(from mark) float64 {
		if d := now.at.Sub(from.at).Seconds(); d > 0 {
			return float64(now.allocs-from.allocs) / d
		}
		return 0
	}
	short := rate(since(int(Interval/Every) - 1))
	long := rate(since(len(r.ring) - 1))
	r.ring[r.n%len(r.ring)] = now
	r.n++
	return math.Min(short, long)
}

var release struct {
	sync.Mutex
	last time.Time
}

// Release returns the heap's free memory to the operating system (a
// collection, then every free page: debug.FreeOSMemory) and reports true,
// unless it did so less than ReleaseEvery ago. Tune calls it when the heap
// kept exceeds its goal by more than Slack (after a burst, such as an
// archive round, the runtime hands those pages back only slowly). The price
// is one collection and the page faults of growing the heap again, at most
// once per ReleaseEvery.
func Release() bool {
	release.Lock()
	defer release.Unlock()
	if now := time.Now(); release.last.IsZero() || now.Sub(release.last) >= ReleaseEvery {
		debug.FreeOSMemory()
		release.last = time.Now()
		return true
	}
	return false
}
