package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

// benchRun tells the ids of one benchmark run from another's: b.N grows
// between runs and the store keeps its schema.
var benchRun atomic.Uint64

// BenchmarkAppendSingleWriter: one goroutine appends single ~200-byte events,
// each committed before the next; reports latency percentiles.
func BenchmarkAppendSingleWriter(b *testing.B) {
	s := newStore(b, Options{})
	storetest.BenchAppendSingleWriter(b, s, benchRun.Add(1))
}

// BenchmarkAppendConcurrent64: 64 goroutines each append single ~200-byte
// events to their own stream; reports throughput and events per transaction.
func BenchmarkAppendConcurrent64(b *testing.B) {
	s := newStore(b, Options{})
	run := benchRun.Add(1)
	txs0 := s.groups.Load()
	storetest.BenchAppendConcurrent(b, s, 64, run)
	b.ReportMetric(float64(b.N)/float64(max(1, s.groups.Load()-txs0)), "events/tx")
}

// benchLog is a log built once per test binary for the read benchmarks, in a
// schema TestMain drops.
var benchLog struct {
	sync.Mutex
	schema string
	events int
}

const benchLogEvents = 200_000

// readLog returns a Store on the shared benchmark log of benchLogEvents
// events in 1,000 streams.
func readLog(b *testing.B) *Store {
	b.Helper()
	benchLog.Lock()
	defer benchLog.Unlock()
	if benchLog.schema == "" {
		schema := "bench_read_log"
		if _, err := sharedPool.Get(b).Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			b.Fatal(err)
		}
		if _, err := Migrate(context.Background(), sharedPool.Get(b), schema); err != nil {
			b.Fatal(err)
		}
		s, err := Open(context.Background(), sharedPool.Get(b), Options{Schema: schema})
		if err != nil {
			b.Fatal(err)
		}
		const per = 1000
		evs := make([]domain.Envelope, per)
		run := benchRun.Add(1)
		for i := 0; i < benchLogEvents; i += per {
			for j := range evs {
				evs[j] = storetest.BenchEvent(run, 0, uint64(i+j))
			}
			if _, err := s.Append(context.Background(), fmt.Sprintf("execution-%d", i/per%1000), eventstore.Any, evs...); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := sharedPool.Get(b).Exec(context.Background(), "VACUUM ANALYZE "+schema+".events"); err != nil {
			b.Fatal(err)
		}
		_ = s.Close()
		benchLog.schema = schema
	}
	s, err := Open(context.Background(), sharedPool.Get(b), Options{Schema: benchLog.schema})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// dropBenchLog drops the read benchmarks' log, if one was built.
func dropBenchLog() {
	benchLog.Lock()
	defer benchLog.Unlock()
	if benchLog.schema != "" && sharedPool.Opened() != nil {
		_, _ = sharedPool.Opened().Exec(context.Background(), "DROP SCHEMA IF EXISTS "+benchLog.schema+" CASCADE")
	}
}

// BenchmarkReadAll: one goroutine pages through a 200,000-event log with
// ReadAll, 1,000 events a page; one op is one pass.
func BenchmarkReadAll(b *testing.B) {
	s := readLog(b)
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		var from uint64
		n := 0
		for {
			page, err := s.ReadAll(ctx, from, 1000)
			if err != nil {
				b.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			n += len(page)
			from = page[len(page)-1].Position + 1
		}
		if n != benchLogEvents {
			b.Fatalf("read %d events, want %d", n, benchLogEvents)
		}
	}
	b.ReportMetric(float64(b.N*benchLogEvents)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkSubscribe: one subscription catches up on a 200,000-event log
// from position 0; one op is one catch-up.
func BenchmarkSubscribe(b *testing.B) {
	s := readLog(b)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		err := s.Subscribe(ctx, 0, eventstore.Filter{}, func(batch []domain.Envelope) error {
			n += len(batch)
			if n >= benchLogEvents {
				cancel()
			}
			return nil
		})
		cancel()
		if n != benchLogEvents || !errors.Is(err, context.Canceled) {
			b.Fatalf("subscription got %d events, ended with %v", n, err)
		}
	}
	b.ReportMetric(float64(b.N*benchLogEvents)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkTrim: a log of 200,000 ~200-byte events in 200 streams, in
// partitions of 20,000 positions, trimmed to position 150,000 keeping 100
// streams; one op is one such log and trim (only the trim is timed).
// Reports the events table's bytes on disk (every partition, with indexes
// and TOAST) before and after.
func BenchmarkTrim(b *testing.B) {
	ctx := context.Background()
	const events, size, cut = 200_000, 20_000, 150_000
	var before, after int64
	size64 := func(schema string) int64 {
		var n int64
		if err := sharedPool.Get(b).QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0)::bigint
			FROM pg_inherits WHERE inhparent = $1::regclass`, schema+".events").Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	for range b.N {
		b.StopTimer()
		schema := freshSchema(b)
		if err := SetPartitionSize(ctx, sharedPool.Get(b), schema, size); err != nil {
			b.Fatal(err)
		}
		s := newStore(b, Options{Schema: schema})
		run := benchRun.Add(1)
		evs := make([]domain.Envelope, 1000)
		for i := 0; i < events; i += len(evs) {
			for j := range evs {
				evs[j] = storetest.BenchEvent(run, 0, uint64(i+j))
			}
			if _, err := s.Append(ctx, fmt.Sprintf("execution-%d", i/len(evs)%1000), eventstore.Any, evs...); err != nil {
				b.Fatal(err)
			}
		}
		keep := make([]string, 100)
		for i := range keep {
			keep[i] = fmt.Sprintf("execution-%d", 2*i)
		}
		before = size64(schema)
		b.StartTimer()
		if err := s.Trim(ctx, cut, keep); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		after = size64(schema)
	}
	b.ReportMetric(float64(before), "bytes-before")
	b.ReportMetric(float64(after), "bytes-after")
}
