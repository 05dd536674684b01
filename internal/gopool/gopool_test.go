package gopool

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestPool: functions run one after another share a goroutine or a few;
// functions run at once get a goroutine each; closing done ends them all,
// and Go still runs a function after that.
func TestPool(t *testing.T) {
	defer goleak.VerifyNone(t)
	done := make(chan struct{})
	p := New(time.Hour, done)
	var ran atomic.Int64
	for range 100 {
		finished := make(chan struct{})
		p.Go(func() { ran.Add(1); close(finished) })
		<-finished
	}
	// The goroutine that closed finished may not be back at its select yet
	// when the next Go looks for it, so allow a few.
	if n := p.Started(); n > 10 {
		t.Errorf("%d goroutines started for 100 functions one after another, want a few", n)
	}
	before := p.Started()
	var running sync.WaitGroup
	release := make(chan struct{})
	running.Add(20)
	for range 20 {
		p.Go(func() { ran.Add(1); running.Done(); <-release })
	}
	running.Wait() // all 20 at once: each has a goroutine
	if n := p.Started(); n < 20 || n > before+20 {
		t.Errorf("%d goroutines started in all after 20 functions at once (%d before)", n, before)
	}
	close(release)
	close(done)
	p.Wait()
	after := make(chan struct{})
	p.Go(func() { ran.Add(1); close(after) })
	<-after
	p.Wait()
	if ran.Load() != 121 {
		t.Fatalf("%d functions ran, want 121", ran.Load())
	}
}

// TestPoolIdle: a goroutine without work for idle ends by itself.
func TestPoolIdle(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := New(10*time.Millisecond, nil)
	finished := make(chan struct{})
	p.Go(func() { close(finished) })
	<-finished
	p.Wait() // returns once the idle goroutine has ended
}
