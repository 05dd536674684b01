package worker

import (
	"testing"
	"time"
)

// TestBackoff: the waits keep their bounds (10ms doubling up to 1s) and are
// spread over the upper half of each by the random source.
func TestBackoff(t *testing.T) {
	zero := func(int64) int64 { return 0 }
	top := func(n int64) int64 { return n - 1 }
	for try, d := range []time.Duration{10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000} {
		d *= time.Millisecond
		if got := jitter(min(10*time.Millisecond<<min(try, 7), time.Second), zero); got != d/2 {
			t.Errorf("try %d with a zero draw: %v, want %v", try, got, d/2)
		}
		if got := jitter(min(10*time.Millisecond<<min(try, 7), time.Second), top); got != d-1 {
			t.Errorf("try %d with the top draw: %v, want just under %v", try, got, d)
		}
		for range 20 {
			if got := backoff(try); got < d/2 || got >= d {
				t.Fatalf("backoff(%d) = %v, out of [%v, %v)", try, got, d/2, d)
			}
		}
	}
}
