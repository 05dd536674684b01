// Package backoff is the one wait between tries of a retry loop: it grows
// from Min, doubling up to Max, with jitter, starts from Min again after a
// try that made progress, and ends early with its context.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Jitter is how a wait is spread so that parts failing together do not
// try again together.
type Jitter int

const (
	// Full waits a random time in [0, d).
	Full Jitter = iota
	// Equal waits d/2 plus a random time in [0, d/2).
	Equal
	// None waits d exactly.
	None
)

// Backoff is the state of one retry loop; it is not safe for concurrent use.
// The zero value waits with full jitter from 10ms up to 1s.
type Backoff struct {
	Min, Max time.Duration // defaults 10ms and 1s; Max below Min is Min
	Jitter   Jitter
	// Rand returns a random number in [0, n); default math/rand/v2's Int64N.
	Rand func(n int64) int64

	tries int // failed tries since the last progress
}

// Next is the wait before the next try, and counts one more failure:
// Min doubled once per failure since the last Reset, at most Max, spread
// by the jitter.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = 10 * time.Millisecond
	}
	if hi <= 0 {
		hi = time.Second
	}
	hi = max(hi, lo)
	d := lo
	for i := 0; i < b.tries && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	b.tries++
	rnd := b.Rand
	if rnd == nil {
		rnd = rand.Int64N
	}
	switch b.Jitter {
	case Full:
		return time.Duration(rnd(int64(d)))
	case Equal:
		half := d / 2
		return half + time.Duration(rnd(int64(d-half)))
	default:
		return d
	}
}

// Reset is called after a try that made progress: the next wait starts
// from Min again.
func (b *Backoff) Reset() { b.tries = 0 }

// Tries is how many failed tries Next counted since the last Reset.
func (b *Backoff) Tries() int { return b.tries }

// Wait sleeps Next; it returns false, at once, when ctx ends first.
func (b *Backoff) Wait(ctx context.Context) bool { return Sleep(ctx, b.Next()) }

// Sleep waits d; it returns false, at once, when ctx ends first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
