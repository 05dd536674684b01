package embedded

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/diskfs"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

// countingFS counts the bytes written to the files whose names start with
// "sealed" (the index) and to the others (the log).
type countingFS struct {
	diskfs.FS
	sealed, log *atomic.Int64
}

func (c countingFS) wrap(path string, f diskfs.File, err error) (diskfs.File, error) {
	if err != nil {
		return nil, err
	}
	n := c.log
	if strings.HasPrefix(filepath.Base(path), "sealed") {
		n = c.sealed
	}
	return countingFile{File: f, n: n}, nil
}

func (c countingFS) Create(path string) (diskfs.File, error) {
	f, err := c.FS.Create(path)
	return c.wrap(path, f, err)
}

func (c countingFS) OpenRW(path string) (diskfs.File, error) {
	f, err := c.FS.OpenRW(path)
	return c.wrap(path, f, err)
}

type countingFile struct {
	diskfs.File
	n *atomic.Int64
}

func (f countingFile) Write(b []byte) (int, error) {
	f.n.Add(int64(len(b)))
	return f.File.Write(b)
}

func (f countingFile) WriteAt(b []byte, off int64) (int, error) {
	f.n.Add(int64(len(b)))
	return f.File.WriteAt(b, off)
}

// BenchmarkSealWrites appends TURNSTILE_BENCH_EVENTS (default 2,000,000)
// small events to 170,000 streams (64 writers, no fsync, the default hot
// part) and reports the bytes written to the index files per event
// appended (seals, merges), next to the bytes of the log, and the time to
// Open the closed log (the index verified). Run it with -benchtime 1x.
func BenchmarkSealWrites(b *testing.B) {
	n := 2_000_000
	if v := os.Getenv("TURNSTILE_BENCH_EVENTS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	const streams, writers = 170_000, 64
	for range b.N {
		dir := b.TempDir()
		var sealed, logged atomic.Int64
		s, err := OpenFS(countingFS{FS: diskfs.OS{}, sealed: &sealed, log: &logged}, dir, Options{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += writers {
					e := storetest.NewEvent("bench.small", map[string]int{"i": i})
					if _, err := s.Append(context.Background(), fmt.Sprintf("execution-%d", i%streams), eventstore.Any, e); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(sealed.Load())/float64(n), "index-B/event")
		b.ReportMetric(float64(logged.Load())/float64(n), "log-B/event")
		b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
		t0 := time.Now()
		s, err = Open(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(t0).Seconds(), "open-s")
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
