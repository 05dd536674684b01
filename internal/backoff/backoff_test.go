package backoff

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// top is a random source that always returns its largest value.
func top(n int64) int64 { return n - 1 }

func TestNextDoublesUpToMaxAndResets(t *testing.T) {
	b := Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond, Jitter: None}
	want := []time.Duration{10, 20, 40, 50, 50}
	for i, w := range want {
		if got := b.Next(); got != w*time.Millisecond {
			t.Fatalf("wait %d = %v, want %v", i, got, w*time.Millisecond)
		}
	}
	b.Reset()
	if got := b.Next(); got != 10*time.Millisecond {
		t.Fatalf("after progress the wait is %v, want Min (10ms)", got)
	}
}

func TestJitter(t *testing.T) {
	zero := func(int64) int64 { return 0 }
	full := Backoff{Min: 100 * time.Millisecond, Jitter: Full, Rand: zero}
	if got := full.Next(); got != 0 {
		t.Fatalf("full jitter with a zero draw = %v, want 0", got)
	}
	full = Backoff{Min: 100 * time.Millisecond, Jitter: Full, Rand: top}
	if got := full.Next(); got != 100*time.Millisecond-1 {
		t.Fatalf("full jitter with the top draw = %v, want just under 100ms", got)
	}
	eq := Backoff{Min: 100 * time.Millisecond, Jitter: Equal, Rand: zero}
	if got := eq.Next(); got != 50*time.Millisecond {
		t.Fatalf("equal jitter with a zero draw = %v, want 50ms", got)
	}
	eq = Backoff{Min: 100 * time.Millisecond, Max: 100 * time.Millisecond, Jitter: Equal, Rand: top}
	eq.Next()
	if got := eq.Next(); got != 100*time.Millisecond-1 {
		t.Fatalf("equal jitter at the cap with the top draw = %v, want just under 100ms", got)
	}
	// The real source stays in bounds.
	r := Backoff{Min: time.Millisecond, Max: 8 * time.Millisecond}
	for range 100 {
		if d := r.Next(); d < 0 || d >= 8*time.Millisecond {
			t.Fatalf("full jitter wait %v out of [0, 8ms)", d)
		}
	}
}

func TestDefaults(t *testing.T) {
	b := Backoff{Jitter: None}
	for range 20 {
		b.Next()
	}
	if got := b.Next(); got != time.Second {
		t.Fatalf("default cap = %v, want 1s", got)
	}
	b.Reset()
	if got := b.Next(); got != 10*time.Millisecond {
		t.Fatalf("default min = %v, want 10ms", got)
	}
}

func TestWaitSleepsAndEndsWithCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := Backoff{Min: time.Second, Max: time.Minute, Jitter: None}
		start := time.Now()
		if !b.Wait(context.Background()) || !b.Wait(context.Background()) {
			t.Fatal("Wait returned false without a cancel")
		}
		if got := time.Since(start); got != 3*time.Second {
			t.Fatalf("two waits took %v, want 1s+2s", got)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(time.Second); cancel() }()
		start = time.Now()
		if b.Wait(ctx) {
			t.Fatal("Wait returned true though ctx ended first")
		}
		if got := time.Since(start); got != time.Second {
			t.Fatalf("a cancelled wait took %v, want 1s (the cancel), not 4s", got)
		}
	})
}
