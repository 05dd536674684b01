package embedded

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

// BenchmarkCommitterMisses times what the committer does for an append to a
// new stream of new events once the log has several levels (the lifecycle's
// every request): a stream look-up and an id look-up that miss the hot part
// and every level. The log: 600,000 events, 6 in each of 100,000 streams
// named like executions'. (callgrind counts the loop alone with
// --toggle-collect='*committerMisses*'.)
func BenchmarkCommitterMisses(b *testing.B) {
	dir, err := os.MkdirTemp("", "turnstile-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// Sealed every 60,000 events, as a run at 20,000 executions a second
	// is (every sealSpacing), the levels merging as they do.
	s, err := Open(dir, Options{NoSync: true, CheckpointEvery: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	s.sealSpacing = time.Hour // no seal but ours (before the first append: the committer reads it after)
	ctx := context.Background()
	evs := make([]domain.Envelope, 6)
	for i := range 100_000 {
		for j := range evs {
			evs[j] = storetest.BenchEvent(0, 7, uint64(6*i+j))
		}
		if _, err := s.Append(ctx, benchStreamName(i), eventstore.NoStream, evs...); err != nil {
			b.Fatal(err)
		}
		if i%10_000 == 9_999 {
			sealNow(b, s)
		}
	}
	names, ids := make([]string, b.N), make([]uuid.UUID, b.N)
	for i := range names {
		names[i] = benchStreamName(1_000_000 + i)
		binary.LittleEndian.PutUint64(ids[i][0:], 99)
		binary.LittleEndian.PutUint64(ids[i][8:], uint64(i)+1)
	}
	runtime.LockOSThread() // the thread's CPU time is the loop's (cpu-ns/op: no waiting for a core counted)
	defer runtime.UnlockOSThread()
	cpu0 := threadCPU(b)
	b.ResetTimer()
	if found := committerMisses(b, s, names, ids); found != 0 {
		b.Fatalf("%d look-ups of new names and ids found something", found)
	}
	b.ReportMetric(float64(threadCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(len(s.sealed.levels)), "levels")
}

// committerMisses looks up new streams and ids as the committer does.
func committerMisses(b *testing.B, s *Store, names []string, ids []uuid.UUID) int {
	found := 0
	for i := range names {
		_, v, err := s.lookup(names[i])
		if err != nil {
			b.Fatal(err)
		}
		_, ok, err := s.findID(ids[i])
		if err != nil {
			b.Fatal(err)
		}
		if v > 0 || ok {
			found++
		}
	}
	return found
}

// threadCPU is the calling thread's user and system time.
func threadCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		b.Skip("no per-thread rusage:", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rusageThread is RUSAGE_THREAD (Linux).
const rusageThread = 1

func benchStreamName(i int) string {
	return fmt.Sprintf("execution-%08x-0000-4000-8000-%012x", i, i)
}
