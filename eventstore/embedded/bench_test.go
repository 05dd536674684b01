package embedded

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

// BenchmarkAppendConcurrent64: 64 goroutines each append single ~200-byte
// events (durable, group commit) to their own stream.
func BenchmarkAppendConcurrent64(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	writes0, sync0 := s.writes.Load(), s.syncTime.Load()
	storetest.BenchAppendConcurrent(b, s, 64, 0)
	writes := float64(max(1, s.writes.Load()-writes0))
	b.ReportMetric(float64(b.N)/writes, "events/fsync")
	b.ReportMetric(float64(s.syncTime.Load()-sync0)/writes/1e3, "fsync-µs")
}

// BenchmarkAppendSingleWriter: one goroutine appends single ~200-byte events,
// each durable before the next; reports latency percentiles.
func BenchmarkAppendSingleWriter(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	storetest.BenchAppendSingleWriter(b, s, 0)
}

// benchLogs holds the logs built once for the read and open benchmarks.
var benchLogs struct {
	sync.Mutex
	dirs map[int]string
}

func removeBenchLogs() {
	benchLogs.Lock()
	defer benchLogs.Unlock()
	for _, d := range benchLogs.dirs {
		_ = os.RemoveAll(d)
	}
	benchLogs.dirs = nil
}

// benchLog returns a directory holding a closed log of n events in 1,000
// streams (built once per process).
func benchLog(b *testing.B, n int) string {
	b.Helper()
	benchLogs.Lock()
	defer benchLogs.Unlock()
	if d, ok := benchLogs.dirs[n]; ok {
		return d
	}
	dir, err := os.MkdirTemp("", "turnstile-bench-")
	if err != nil {
		b.Fatal(err)
	}
	s, err := Open(dir, Options{NoSync: true, CheckpointEvery: -1})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const per = 1000
	evs := make([]domain.Envelope, per)
	for i := 0; i < n; i += per {
		k := min(per, n-i)
		for j := range k {
			evs[j] = storetest.BenchEvent(0, 7, uint64(i+j))
		}
		if _, err := s.Append(ctx, fmt.Sprintf("execution-%d", (i/per)%1000), eventstore.Any, evs[:k]...); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	if benchLogs.dirs == nil {
		benchLogs.dirs = map[int]string{}
	}
	benchLogs.dirs[n] = dir
	return dir
}

// BenchmarkReadAll reads a 200,000-event log from the start: with ReadAll in
// pages of 10,000, and with Subscribe until it has caught up.
func BenchmarkReadAll(b *testing.B) {
	const n = 200_000
	dir := benchLog(b, n)
	s, err := Open(dir, Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	ctx := context.Background()
	b.Run("ReadAll", func(b *testing.B) {
		start := time.Now()
		for range b.N {
			var from uint64
			for from < n {
				evs, err := s.ReadAll(ctx, from, 10_000)
				if err != nil || len(evs) == 0 {
					b.Fatalf("ReadAll(%d): %d events, %v", from, len(evs), err)
				}
				from = evs[len(evs)-1].Position + 1
			}
		}
		b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "events/s")
	})
	b.Run("Subscribe", func(b *testing.B) {
		start := time.Now()
		for range b.N {
			ctx, cancel := context.WithCancel(ctx)
			got := 0
			err := s.Subscribe(ctx, 0, eventstore.Filter{}, func(evs []domain.Envelope) error {
				if got += len(evs); got >= n {
					cancel()
				}
				return nil
			})
			cancel()
			if got != n {
				b.Fatalf("Subscribe delivered %d events, want %d (%v)", got, n, err)
			}
		}
		b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "events/s")
	})
}

// BenchmarkOpen1M opens (and closes, untimed) a closed 1,000,000-event log:
// checking every record against the sealed file (the default), trusting the
// sealed file, and with no sealed file (full scan).
func BenchmarkOpen1M(b *testing.B) {
	const n = 1_000_000
	dir := benchLog(b, n)

	for _, c := range []struct {
		name    string
		opts    Options
		noIndex bool
	}{
		{"verify", Options{}, false},
		{"trust-index", Options{TrustIndex: true}, false},
		{"no-index", Options{}, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				if c.noIndex {
					if err := removeLevels(b, dir); err != nil && !os.IsNotExist(err) {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				s, err := Open(dir, c.opts)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if h, _ := s.Head(context.Background()); h != n {
					b.Fatalf("Head = %d, want %d", h, n)
				}
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkSealedMemory appends 1,000,000 small events to 170,000 streams
// (64 writers, no fsync) with the default hot part, once, in two halves,
// sealing everything after each half. It reports the store's live heap
// (after a GC) when empty, after each half, its growth per event over the
// second half (what the sealed part costs per event: the goal is at most 2
// bytes), the memory the sealed part keeps per sealed event, and the hot
// part left before the final seals. Run it with -benchtime 1x.
func BenchmarkSealedMemory(b *testing.B) {
	const n, streams, writers = 1_000_000, 170_000, 64
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for range b.N {
		dir := b.TempDir()
		s, err := Open(dir, Options{NoSync: true, HotEvents: DefaultHotEvents})
		if err != nil {
			b.Fatal(err)
		}
		empty := heap()
		var hot, hotStreams int
		fill := func(from, to int) uint64 {
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := from + w; i < to; i += writers {
						e := storetest.NewEvent("bench.small", map[string]int{"i": i})
						if _, err := s.Append(context.Background(), fmt.Sprintf("execution-%d", i%streams), eventstore.Any, e); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			s.mu.RLock()
			hot, hotStreams = len(s.offsets), len(s.streams)
			s.mu.RUnlock()
			if err := s.sealBackground(); err != nil {
				b.Fatal(err)
			}
			return heap()
		}
		half := fill(0, n/2)
		lookups := s.lookups.Load()
		full := fill(n/2, n)
		lookups = s.lookups.Load() - lookups
		s.mu.RLock()
		sealedN, mem := s.base, s.sealed.memory()
		s.mu.RUnlock()
		b.ReportMetric(float64(empty)/(1<<20), "heap-empty-MiB")
		b.ReportMetric(float64(half)/(1<<20), "heap-half-MiB")
		b.ReportMetric(float64(full)/(1<<20), "heap-full-MiB")
		b.ReportMetric((float64(full)-float64(half))/(n/2), "growth-B/event")
		b.ReportMetric(float64(mem)/float64(max(1, sealedN)), "sealed-B/event")
		b.ReportMetric(float64(hot), "hot-events-before-seal")
		b.ReportMetric(float64(hotStreams), "hot-streams-before-seal")
		b.ReportMetric(float64(s.seals.Load()), "seals")
		b.ReportMetric(float64(lookups)/(n/2), "disk-lookups/event")
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
