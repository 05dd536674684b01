package storetest

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

// The append benchmarks every backend runs the same way, on a store its
// benchmark opens; what a backend measures beyond them (fsyncs, group
// transactions) it reports itself.

// BenchData is a ~200-byte JSON payload, the data of every BenchEvent.
var BenchData = json.RawMessage(`{"action":"demo.sleep","execution":"6f1c2a9e-4b7d-4c1e-9f0a-2d3e4f5a6b7c","client":"bench","queue":"queue-demo.sleep","params":{"seconds":1,"note":"` + strings.Repeat("x", 40) + `"},"attempt":1}`)

// BenchEvent makes a benchmark's event with a cheap unique id: run tells
// one benchmark run from another on a store that keeps its events (b.N
// grows from run to run), writer and seq tell the events of a run apart.
func BenchEvent(run, writer, seq uint64) domain.Envelope {
	var id uuid.UUID
	binary.LittleEndian.PutUint64(id[0:], run<<32|(writer+1))
	binary.LittleEndian.PutUint64(id[8:], seq+1)
	return domain.Envelope{
		ID:            id,
		Type:          "execution.scheduled",
		SchemaVersion: 1,
		Owner:         domain.OwnerExecutor,
		CorrelationID: "corr-6f1c2a9e",
		Data:          BenchData,
	}
}

// BenchAppendSingleWriter times b.N appends of one event each by one
// goroutine, each committed before the next, and reports the p50 and p99
// latencies.
func BenchAppendSingleWriter(b *testing.B, st eventstore.Store, run uint64) {
	b.Helper()
	ctx := context.Background()
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if _, err := st.Append(ctx, "execution-single", eventstore.Any, BenchEvent(run, 0, uint64(i))); err != nil {
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

// BenchAppendConcurrent times b.N appends of one event each by writers
// goroutines, each to a stream of its own, and reports the throughput. The
// timer is stopped when it returns.
func BenchAppendConcurrent(b *testing.B, st eventstore.Store, writers int, run uint64) {
	b.Helper()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
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
				if _, err := st.Append(ctx, stream, eventstore.Any, BenchEvent(run, uint64(w), uint64(i))); err != nil {
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
}
