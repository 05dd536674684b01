package archive_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/turnstile/turnstile/eventstore/archive/archivetest"
	"github.com/turnstile/turnstile/eventstore/embedded"
)

// TestFigures measures archive write and verify speed over a real log (the
// figures in BENCHMARKS.md, "the archive: bytes and speed"). It runs only when
// TURNSTILE_ARCHIVE_FIGURES names an embedded data directory's log; the
// archive goes to TURNSTILE_ARCHIVE_OUT (default: a temporary directory).
func TestFigures(t *testing.T) {
	src := os.Getenv("TURNSTILE_ARCHIVE_FIGURES")
	if src == "" {
		t.Skip("TURNSTILE_ARCHIVE_FIGURES names no log")
	}
	ctx := context.Background()
	store, err := embedded.Open(src, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	head, err := store.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("TURNSTILE_ARCHIVE_OUT")
	if dir == "" {
		dir = t.TempDir()
	}
	a := archivetest.Open(t, dir)
	start, cpu0 := time.Now(), cpuTime()
	if err := a.Write(ctx, store, 0, head); err != nil {
		t.Fatal(err)
	}
	took, cpu := time.Since(start), cpuTime()-cpu0
	var bytes int64
	for _, s := range a.Segments() {
		bytes += s.Bytes
	}
	var index int64
	matches, _ := filepath.Glob(filepath.Join(dir, "*.index.json.gz"))
	for _, m := range matches {
		if info, err := os.Stat(m); err == nil {
			index += info.Size()
		}
	}
	t.Logf("write: %d events in %v: %.0f events/s (CPU %v: %.0f events per CPU-second); segments %d bytes (%.1f bytes/event), indexes %d bytes (%.1f bytes/event)",
		head, took.Round(time.Millisecond), float64(head)/took.Seconds(), cpu.Round(time.Millisecond), float64(head)/cpu.Seconds(),
		bytes, float64(bytes)/float64(head), index, float64(index)/float64(head))

	b := archivetest.Open(t, dir)
	start, cpu0 = time.Now(), cpuTime()
	v, err := b.Verify(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	took, cpu = time.Since(start), cpuTime()-cpu0
	t.Logf("verify: %d events in %d segments in %v: %.0f events/s (CPU %v: %.0f events per CPU-second)", v.Events, v.Segments,
		took.Round(time.Millisecond), float64(v.Events)/took.Seconds(), cpu.Round(time.Millisecond), float64(v.Events)/cpu.Seconds())

	start, cpu0 = time.Now(), cpuTime()
	n := 0
	for from := uint64(0); from < head; {
		evs, err := b.Read(ctx, from, 4096)
		if err != nil {
			t.Fatal(err)
		}
		n += len(evs)
		from = evs[len(evs)-1].Position + 1
	}
	took, cpu = time.Since(start), cpuTime()-cpu0
	t.Logf("read in order: %d events in %v: %.0f events/s (CPU %v: %.0f events per CPU-second)", n, took.Round(time.Millisecond),
		float64(n)/took.Seconds(), cpu.Round(time.Millisecond), float64(n)/cpu.Seconds())

	evs, _ := b.Read(ctx, head/2, 1)
	stream := evs[0].Stream
	start = time.Now()
	got, err := b.ReadStream(ctx, stream)
	if err != nil || len(got) == 0 {
		t.Fatal(err)
	}
	t.Logf("ReadStream(%s): %d events in %v", stream, len(got), time.Since(start).Round(time.Microsecond))
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
