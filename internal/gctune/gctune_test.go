package gctune

import (
	"context"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		live, budget uint64
		want         int
	}{
		{0, gib, MaxPercent},
		{50 << 20, gib, MaxPercent},        // a small heap grows to 5× itself
		{256 << 20, gib, 300},              // the goal is exactly the budget
		{400 << 20, gib, 156},              // (1024-400)/400
		{gib / 2, gib, MinPercent},         // half the budget: Go's default
		{2 * gib, gib, MinPercent},         // past the budget: never below the default
		{100 << 20, 100 << 20, MinPercent}, // at the budget
	} {
		if got := Percent(c.live, c.budget); got != c.want {
			t.Errorf("Percent(%d MiB, %d MiB) = %d, want %d", c.live>>20, c.budget>>20, got, c.want)
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
	deadline := time.Now().Add(10 * time.Second)
	for gcPercent() != MaxPercent {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC is %d, want %d for a test's small heap", gcPercent(), MaxPercent)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Tune did not stop with its context")
	}
}
