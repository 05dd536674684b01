package postgres

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// benchData is a ~200-byte JSON payload, as in the embedded benchmarks.
var benchData = json.RawMessage(`{"action":"demo.sleep","execution":"6f1c2a9e-4b7d-4c1e-9f0a-2d3e4f5a6b7c","client":"bench","queue":"queue-demo.sleep","params":{"seconds":1,"note":"` + strings.Repeat("x", 40) + `"},"attempt":1}`)

// benchRun tells the ids of one benchmark run from another's: b.N grows
// between runs and the store keeps its schema.
var benchRun atomic.Uint64

// benchEvent makes an event with a cheap unique id (run, writer, sequence).
func benchEvent(run, writer, seq uint64) domain.Envelope {
	var id uuid.UUID
	binary.LittleEndian.PutUint64(id[0:], run<<32|(writer+1))
	binary.LittleEndian.PutUint64(id[8:], seq+1)
	return domain.Envelope{
		ID:            id,
		Type:          "execution.scheduled",
		SchemaVersion: 1,
		Owner:         domain.OwnerExecutor,
		CorrelationID: "corr-6f1c2a9e",
		Data:          benchData,
	}
}

// BenchmarkAppendSingleWriter: one goroutine appends single ~200-byte events,
// each committed before the next; reports latency percentiles.
func BenchmarkAppendSingleWriter(b *testing.B) {
	s := newStore(b, Options{})
	ctx := context.Background()
	run := benchRun.Add(1)
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if _, err := s.Append(ctx, "execution-single", eventstore.Any, benchEvent(run, 0, uint64(i))); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	slices.Sort(lat)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(lat[len(lat)/2]), "p50-µs")
	b.ReportMetric(us(lat[len(lat)*99/100]), "p99-µs")
}

// BenchmarkAppendConcurrent64: 64 goroutines each append single ~200-byte
// events to their own stream; reports throughput and events per transaction.
func BenchmarkAppendConcurrent64(b *testing.B) {
	s := newStore(b, Options{})
	ctx := context.Background()
	run := benchRun.Add(1)
	const writers = 64
	var next atomic.Int64
	var wg sync.WaitGroup
	txs0 := s.groups.Load()
	b.ResetTimer()
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			stream := fmt.Sprintf("execution-%d", w)
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if _, err := s.Append(ctx, stream, eventstore.Any, benchEvent(run, uint64(w), uint64(i))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "events/s")
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
		if _, err := testPool(b).Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			b.Fatal(err)
		}
		if _, err := Migrate(context.Background(), testPool(b), schema); err != nil {
			b.Fatal(err)
		}
		s, err := Open(context.Background(), testPool(b), Options{Schema: schema})
		if err != nil {
			b.Fatal(err)
		}
		const per = 1000
		evs := make([]domain.Envelope, per)
		run := benchRun.Add(1)
		for i := 0; i < benchLogEvents; i += per {
			for j := range evs {
				evs[j] = benchEvent(run, 0, uint64(i+j))
			}
			if _, err := s.Append(context.Background(), fmt.Sprintf("execution-%d", i/per%1000), eventstore.Any, evs...); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := testPool(b).Exec(context.Background(), "VACUUM ANALYZE "+schema+".events"); err != nil {
			b.Fatal(err)
		}
		_ = s.Close()
		benchLog.schema = schema
	}
	s, err := Open(context.Background(), testPool(b), Options{Schema: benchLog.schema})
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
	if benchLog.schema != "" && shared.pool != nil {
		_, _ = shared.pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+benchLog.schema+" CASCADE")
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
