package postgres

import (
	"context"
	"encoding/binary"
	"encoding/json"
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
