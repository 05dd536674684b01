package projections

import (
	"sync"
	"testing"
)

// TestWaitPercentilesFollowTheWaits: the cached percentiles are computed
// again after every new wait (a cache that outlived a change would serve
// stale figures), and concurrent readers agree.
func TestWaitPercentilesFollowTheWaits(t *testing.T) {
	r := &statsRecord{}
	if p50, p95 := r.percentiles(); p50 != 0 || p95 != 0 {
		t.Fatalf("no waits: %v %v, want 0 0", p50, p95)
	}
	for i := 1; i <= 100; i++ {
		r.addWait(float64(i))
	}
	if p50, p95 := r.percentiles(); p50 != 50 || p95 != 95 {
		t.Fatalf("waits 1..100: p50 %v p95 %v, want 50 95", p50, p95)
	}
	r.addWait(1000) // one more: the 95th percentile of 101 waits is the 96th
	if _, p95 := r.percentiles(); p95 != 96 {
		t.Fatalf("after one more wait: p95 %v, want 96 (a stale cache says 95)", p95)
	}
	for range waitWindow { // the ring turns over: every wait is 7 now
		r.addWait(7)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if p50, p95 := r.percentiles(); p50 != 7 || p95 != 7 {
				t.Errorf("a full window of 7s: p50 %v p95 %v", p50, p95)
			}
		}()
	}
	wg.Wait()
}
