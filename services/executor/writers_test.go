package executor

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestWritersReuseGoroutines: work run one after another reuses one
// goroutine; work run at once gets a goroutine each; close waits for all of
// them to end.
func TestWritersReuseGoroutines(t *testing.T) {
	p := newWriters()
	var ran atomic.Int64
	for range 100 {
		done := make(chan struct{})
		p.run(func() { ran.Add(1); close(done) })
		<-done
	}
	// The goroutine that closed done may not be back at its select yet when
	// the next run looks for it, so allow a few.
	if n := p.started.Load(); n > 10 {
		t.Errorf("%d goroutines started for 100 runs one after another, want a few", n)
	}
	before := p.started.Load()
	var wg sync.WaitGroup
	release := make(chan struct{})
	wg.Add(20)
	for range 20 {
		p.run(func() { ran.Add(1); wg.Done(); <-release })
	}
	if n := p.started.Load() - before; n < 20-before {
		t.Errorf("%d goroutines started for 20 runs at once (%d idle before)", n, before)
	}
	wg.Wait()
	close(release)
	p.close()
	if ran.Load() != 120 {
		t.Fatalf("%d runs, want 120", ran.Load())
	}
}
