package domain_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/turnstile/turnstile/domain"
)

// benchRound folds, per iteration, a request, the grant the queue's
// Grantable picks, and that execution's end, over keys key values: the
// queue fold's cost per lifecycle with and without max_concurrent_total.
func benchRound(b *testing.B, keys, total int) {
	l := newQLog(b)
	l.define(domain.Policy{Ref: "act", Runner: "r", MaxConcurrent: 2, MaxConcurrentTotal: total, ConcurrencyKey: "tenant"})
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("k%d", i)
	}
	q := l.qs.Get("act")
	for i := range keys * 2 { // two waiters per key value
		l.request(fmt.Sprintf("w%d", i), "act", names[i%keys])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("e%d", i)
		l.request(id, "act", names[i%keys])
		ws := q.Grantable(1, l.at)
		if len(ws) == 0 {
			b.Fatal("nothing grantable")
		}
		l.mustGrant(ws[0].Execution, "act", ws[0].Key)
		l.end(ws[0].Execution, domain.ExecutionCompleted{})
	}
}

func BenchmarkQueueRoundPlain1000Keys(b *testing.B) { benchRound(b, 1000, 0) }
func BenchmarkQueueRoundTotal1000Keys(b *testing.B) { benchRound(b, 1000, 10) }

// TestBytesPerKeyValue measures (and logs) the heap the queue fold keeps
// per key value with one waiter, at 10,000 key values, with a total limit,
// and fails above 1 KiB (issue 18: a few hundred bytes each). Catches: a
// per-key-value structure for the round robin that grows with the keys
// (a sorted copy, a ring of pointers per value).
func TestBytesPerKeyValue(t *testing.T) {
	if testing.Short() {
		t.Skip("measures")
	}
	const keys = 10_000
	measure := func(total int) float64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l := newQLog(t)
		l.define(domain.Policy{Ref: "act", Runner: "r", MaxConcurrent: 1, MaxConcurrentTotal: total, ConcurrencyKey: "tenant"})
		for i := range keys {
			l.request(fmt.Sprintf("%08d", i), "act", fmt.Sprintf("k%d", i))
		}
		l.hist = nil
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(l.qs)
		return float64(after.HeapAlloc-before.HeapAlloc) / keys
	}
	plain, total := measure(0), measure(10)
	t.Logf("bytes per key value with one waiter: %.0f without a total, %.0f with max_concurrent_total", plain, total)
	if total > 1024 {
		t.Errorf("%.0f bytes per key value with max_concurrent_total, want at most 1024", total)
	}
}
