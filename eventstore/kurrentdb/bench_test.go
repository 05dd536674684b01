package kurrentdb

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

// Benchmarks of the backend against the server named by
// TURNSTILE_KURRENTDB_URL, in a fresh namespace each; skipped without one.
// They measure the server and the network as much as this package:
//
//	TURNSTILE_KURRENTDB_URL='kurrentdb://localhost:2113?tls=false' \
//	  go test -run '^$' -bench . -benchtime 20000x ./eventstore/kurrentdb/

func benchStore(b *testing.B) *Store {
	b.Helper()
	raw := os.Getenv(urlVar)
	if raw == "" {
		b.Skip(noServer)
	}
	conn, _, err := ConnectionString(raw)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := esdb.ParseConnectionString(conn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.Logger = esdb.NoopLogging()
	client, err := esdb.NewClient(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = client.Close() })
	origin, err := LogEnd(b.Context(), client)
	if err != nil {
		b.Fatalf("%s=%s: %v", urlVar, raw, err)
	}
	s, err := Open(client, Options{Namespace: fmt.Sprintf("bench%d-", time.Now().UnixNano()), Origin: origin, Logger: discard})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// benchEvent is a ~200-byte event, like the embedded store's benchmarks.
func benchEvent(i int) domain.Envelope {
	e := storetest.NewEvent("bench.appended", json.RawMessage(fmt.Sprintf(`{"i":%d,"pad":"%0150d"}`, i, 0)))
	e.CorrelationID = "bench"
	return e
}

// BenchmarkAppendConcurrent64: 64 goroutines, one event per append, each on
// its own stream with expected version Any.
func BenchmarkAppendConcurrent64(b *testing.B) {
	s := benchStore(b)
	const writers = 64
	ctx := context.Background()
	var wg sync.WaitGroup
	next := make(chan int)
	b.ResetTimer()
	for w := range writers {
		wg.Go(func() {
			for i := range next {
				if _, err := s.Append(ctx, fmt.Sprintf("execution-%d", w), eventstore.Any, benchEvent(i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	for i := range b.N {
		next <- i
	}
	close(next)
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkAppendSingleWriter: one writer, one event per append, fenced with
// the exact expected version; reports latency percentiles.
func BenchmarkAppendSingleWriter(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		expected := eventstore.NoStream
		if i > 0 {
			expected = eventstore.Exact(uint64(i - 1))
		}
		start := time.Now()
		if _, err := s.Append(ctx, "queue-bench", expected, benchEvent(i)); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// fill appends n benchmark events to s, 500 per append, across streams.
func fill(b *testing.B, s *Store, n int) {
	b.Helper()
	const batch = 500
	for i := 0; i < n; i += batch {
		evs := make([]domain.Envelope, min(batch, n-i))
		for j := range evs {
			evs[j] = benchEvent(i + j)
		}
		if _, err := s.Append(context.Background(), fmt.Sprintf("execution-%d", i/batch), eventstore.Any, evs...); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadAll: ReadAll of b.N stored events, 4096 at a time.
func BenchmarkReadAll(b *testing.B) {
	s := benchStore(b)
	fill(b, s, b.N)
	b.ResetTimer()
	n := 0
	var from uint64
	for {
		page, err := s.ReadAll(context.Background(), from, 4096)
		if err != nil {
			b.Fatal(err)
		}
		n += len(page)
		if len(page) < 4096 {
			break
		}
		from = after(page[len(page)-1].Position)
	}
	if n != b.N {
		b.Fatalf("read %d events, want %d", n, b.N)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkSubscribe: a subscription catching up on b.N stored events.
func BenchmarkSubscribe(b *testing.B) {
	s := benchStore(b)
	fill(b, s, b.N)
	b.ResetTimer()
	if n := subscribeCount(b, s); n != b.N {
		b.Fatalf("delivered %d events, want %d", n, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// subscribeCount subscribes from the start until it has every event of the
// store, and returns how many.
func subscribeCount(b *testing.B, s *Store) int {
	b.Helper()
	head, err := s.Head(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	err = s.Subscribe(ctx, 0, eventstore.Filter{}, func(batch []domain.Envelope) error {
		n += len(batch)
		if after(batch[len(batch)-1].Position) >= head {
			cancel()
		}
		return nil
	})
	if ctx.Err() == nil {
		b.Fatal(err)
	}
	return n
}
