package gctune

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/turnstile/turnstile/internal/waitfor"
)

func TestPercent(t *testing.T) {
	const gib = 1 << 30
	busy := float64(gib) // allocates a GiB a second: the budget decides
	for _, c := range []struct {
		live, budget uint64
		rate         float64
		want         int
	}{
		{0, gib, busy, MaxPercent},
		{50 << 20, gib, busy, MaxPercent},        // a small heap grows to 5× itself
		{256 << 20, gib, busy, 300},              // the goal is exactly the budget
		{400 << 20, gib, busy, 156},              // (1024-400)/400
		{gib / 2, gib, busy, MinPercent},         // half the budget: Go's default
		{2 * gib, gib, busy, MinPercent},         // past the budget: never below the default
		{100 << 20, 100 << 20, busy, MinPercent}, // at the budget
		{0, gib, 0, MinPercent},                  // nothing allocated yet
		{30 << 20, gib, 3 << 20, MinPercent},     // an idle server: 15 MiB in Interval, less than its live heap
		{30 << 20, gib, 12 << 20, 200},           // 60 MiB in Interval: twice the live heap
		{30 << 20, gib, 300 << 20, MaxPercent},   // a busy one
	} {
		if got := Percent(c.live, c.budget, c.rate); got != c.want {
			t.Errorf("Percent(%d MiB, %d MiB, %.0f MiB/s) = %d, want %d", c.live>>20, c.budget>>20, c.rate/(1<<20), got, c.want)
		}
	}
}

// gcPercent returns the current GOGC.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestTuneSetsTheTarget: with GOGC unset, Tune raises the target of a
// process with a small live heap, and stops when its context ends; with
// GOGC set, it changes nothing.
func TestTuneSetsTheTarget(t *testing.T) {
	before := gcPercent()
	defer debug.SetGCPercent(before)

	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Tune(ctx); close(done) }()
	select {
	case <-done: // returns at once
	case <-time.After(10 * time.Second):
		t.Fatal("Tune did not return with GOGC set")
	}
	cancel()
	if p := gcPercent(); p != 150 {
		t.Fatalf("with GOGC set, GOGC became %d", p)
	}

	t.Setenv("GOGC", "")
	debug.SetGCPercent(100)
	ctx, cancel = context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() { Tune(ctx); close(done) }()
	// While the process allocates fast, its small heap may grow to the most.
	stopAlloc := make(chan struct{})
	allocDone := make(chan struct{})
	go func() {
		defer close(allocDone)
		for {
			select {
			case <-stopAlloc:
				return
			default:
			}
			for range 1000 {
				sink = make([]byte, 64<<10)
			}
		}
	}()
	waitPercent(t, MaxPercent, "for a test's small heap allocating fast")
	close(stopAlloc)
	<-allocDone
	// Once it allocates little, Go's default again.
	waitPercent(t, MinPercent, "for a test that stopped allocating")
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Tune did not stop with its context")
	}
}

// sink keeps the test's allocations from being optimised away.
var sink []byte

// waitPercent waits until GOGC is want.
func waitPercent(t *testing.T, want int, what string) {
	t.Helper()
	waitfor.That(t, fmt.Sprintf("GOGC %d %s", want, what), func() bool { return gcPercent() == want },
		waitfor.Note(func() string { return fmt.Sprintf("GOGC is %d", gcPercent()) }))
}

// TestRelease: after a burst that grew the heap, Release hands the freed
// pages back to the operating system (the runtime's released bytes grow
// by most of the burst), and a second call within ReleaseEvery does
// nothing.
func TestRelease(t *testing.T) {
	released := func() uint64 {
		s := []metrics.Sample{{Name: "/memory/classes/heap/released:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	Release() // whatever the tests before left
	release.Lock()
	release.last = time.Time{}
	release.Unlock()
	before := debug.SetGCPercent(-1) // no collection during the burst: the heap holds it all
	burst := make([][]byte, 64)
	for i := range burst {
		burst[i] = make([]byte, 1<<20)
		burst[i][0] = 1 // touch it
	}
	burst = nil
	debug.SetGCPercent(before)
	r0 := released()
	if !Release() {
		t.Fatal("the first Release did nothing")
	}
	if got := released() - r0; got < 32<<20 {
		t.Errorf("Release returned %d MiB after a 64 MiB burst, want at least 32", got>>20)
	}
	if Release() {
		t.Error("a second Release within ReleaseEvery ran again")
	}
}

// TestTuneReturnsWhatExceedsTheGoal: once a burst has left the heap far
// above its goal, Tune returns the free part (Release) without waiting for
// the runtime's scavenger.
func TestTuneReturnsWhatExceedsTheGoal(t *testing.T) {
	before := gcPercent()
	defer debug.SetGCPercent(before)
	t.Setenv("GOGC", "")
	release.Lock()
	release.last = time.Time{}
	release.Unlock()
	debug.SetGCPercent(-1) // no collection during the burst: the heap holds it all
	burst := make([][]byte, 64)
	for i := range burst {
		burst[i] = make([]byte, 1<<20)
		burst[i][0] = 1
	}
	burst = nil
	debug.SetGCPercent(100)
	runtime.GC() // the goal falls back to about twice the small live heap; the burst's pages stay
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Tune(ctx)
	waitfor.That(t, "Tune to return the heap the burst left above its goal", func() bool {
		release.Lock()
		defer release.Unlock()
		return !release.last.IsZero()
	})
}

// TestRatesSmoothBursts: at a steady rate the rate is that rate; a burst
// (40 MB within a second, as an archive round) raises it by its share of
// RateWindow, not of Interval; a process that stops allocating is at zero
// within an Interval.
func TestRatesSmoothBursts(t *testing.T) {
	const mb = 1 << 20
	at := time.Unix(0, 0)
	allocs := uint64(0)
	r := newRates(mark{allocs, at})
	tick := func(bytes float64) float64 {
		at = at.Add(Every)
		allocs += uint64(bytes)
		return r.add(mark{allocs, at})
	}
	steady := 2.5 * mb * Every.Seconds()
	var rate float64
	for range int(time.Minute / Every) {
		rate = tick(steady)
	}
	if math.Abs(rate-2.5*mb) > 1 {
		t.Fatalf("steady: rate %.0f, want %.0f", rate, 2.5*mb)
	}
	for range 4 { // the burst: 40 MB in a second
		rate = tick(steady + 10*mb)
	}
	if want := 2.5*mb + 40.0*mb/RateWindow.Seconds(); math.Abs(rate-want) > 1 {
		t.Fatalf("after a burst: rate %.1f MB/s, want %.1f (its share of the window)", rate/mb, want/mb)
	}
	for range int(Interval / Every) {
		rate = tick(0)
	}
	if rate != 0 {
		t.Fatalf("an Interval without allocations: rate %.0f, want 0", rate)
	}
}
