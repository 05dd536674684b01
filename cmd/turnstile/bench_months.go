package main

// turnstile bench months: a compressed "month" with archiving on
// (docs/log-over-months.md): executions in windows on the embedded store,
// with checkpoints every few seconds and the archiver moving everything
// older than a few seconds to the archive; after each window the process's
// parts are stopped and started again on the same log (timed: the executor
// starts from the newest checkpoint), and the live log's disk, the
// archive's bytes per event and the memory are measured.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/archive"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/node"
)

// monthsWindow is what bench months measured after one window.
type monthsWindow struct {
	Window         int     `json:"window"`
	Events         uint64  `json:"events"`           // the log's head
	LiveStart      uint64  `json:"live_start"`       // the live log's first position
	LiveBytes      int64   `json:"live_bytes"`       // the data directory on disk
	ArchiveBytes   int64   `json:"archive_bytes"`    // the archive directory on disk
	ArchiveEvents  uint64  `json:"archive_events"`   // events in the archive
	RSSBytes       int64   `json:"rss_bytes"`        // the process's resident set after the window
	RSSMedianBytes int64   `json:"rss_median_bytes"` // the median of the resident set sampled every 250 ms during the window
	RSSFreedBytes  int64   `json:"rss_freed_bytes"`  // the resident set after a GC that returned the free pages to the system
	HeapBytes      uint64  `json:"heap_bytes"`       // live heap after a GC
	RestartSeconds float64 `json:"restart_seconds"`  // stop, reopen the log, executor caught up
	ExecutionsPerS float64 `json:"executions_per_s"` // in the window
	Checkpoint     uint64  `json:"checkpoint"`       // the newest checkpoint's position: where the restarted executor's fold began
}

func cmdBenchMonths(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := newFlags("bench months", stderr)
	n := fset.Int("executions", 200_000, "executions in all")
	windows := fset.Int("windows", 10, "windows: measured, then restarted, after each")
	actions := fset.Int("actions", 10, "actions")
	maxConc := fset.Int("max-concurrent", 10, "max_concurrent of every action")
	submitters := fset.Int("submitters", 32, "goroutines requesting executions")
	workers := fset.Int("workers", 4, "in-process workers")
	every := fset.Duration("checkpoint-every", 2*time.Second, "log time between checkpoints")
	after := fset.Duration("archive-after", 4*time.Second, "how old a checkpoint is before the log before it is archived")
	segEvents := fset.Int("archive-segment-events", 100_000, "events per archive segment")
	logSegBytes := fset.Int64("log-segment-bytes", 8<<20, "the embedded log's segment file size (the unit a trim reclaims)")
	dir := fset.String("dir", "", "where the data and archive directories go (default: a temporary directory, removed after)")
	asJSON := fset.Bool("json", false, "print the windows as JSON lines")
	memProfile := fset.String("memprofile", "", "write a heap profile (in use, after a GC) at the end to this file; a name with %d: one after each window, numbered")
	filterCache := fset.Int("filter-cache-bytes", archive.DefaultFilterCacheBytes, "bytes of archive segments' stream filters kept in memory")
	inFlight := fset.Int("in-flight", 2000, "requested executions not yet ended, at most (a steady arrival rather than a window's backlog; 0: no bound)")
	if err := parse(fset, args); err != nil {
		return err
	}
	if *n < 1 || *windows < 1 || *actions < 1 || *maxConc < 1 || *submitters < 1 || *workers < 1 || *every <= 0 || *after <= 0 || *segEvents < 1 || *inFlight < 0 || *filterCache < 0 {
		return usageError{errors.New("every count and duration must be positive")}
	}
	root := *dir
	if root == "" {
		tmp, err := os.MkdirTemp("", "turnstile-months-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		root = tmp
	}
	dataDir, archDir := filepath.Join(root, "data"), filepath.Join(root, "archive")
	log := newLogger(io.Discard)
	arch, err := archive.Open(archDir)
	if err != nil {
		return err
	}
	arch.SetSegmentEvents(*segEvents)
	arch.SetFilterCacheBytes(*filterCache)
	slots := (*actions**maxConc + *workers - 1) / *workers
	var store *embedded.Store
	var nd *node.Node
	start := func() (time.Duration, error) {
		t0 := time.Now()
		s, err := embedded.Open(filepath.Join(dataDir, "log"), embedded.Options{SegmentBytes: *logSegBytes})
		if err != nil {
			return 0, err
		}
		n, err := node.Start(ctx, s, node.Config{Workers: *workers, Slots: slots, Logger: log, LoseWorkers: true,
			CheckpointEvery: *every, Archive: arch, ArchiveAfter: *after, ArchiveEvery: 100 * time.Millisecond})
		if err != nil {
			s.Close()
			return 0, err
		}
		store, nd = s, n
		return time.Since(t0), nil
	}
	stop := func() {
		nd.Stop()
		store.Close()
	}
	if _, err := start(); err != nil {
		return err
	}
	for i := range *actions {
		p := domain.Policy{Ref: fmt.Sprintf("bench.%d", i), Runner: "core.noop", MaxConcurrent: *maxConc, MaxQueueLength: domain.MaxQueueLengthLimit}
		if _, err := nd.Commands.DefineAction(ctx, p); err != nil {
			stop()
			return err
		}
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "%6s %12s %12s %12s %14s %10s %9s %9s %9s %9s %10s %10s\n", "window", "events", "live start", "live MiB", "archive B/ev", "exec/s", "RSS MiB", "RSS med", "RSS freed", "heap MiB", "restart s", "checkpoint")
	}
	per := (*n + *windows - 1) / *windows
	for w := range *windows {
		head, err := store.Head(ctx)
		if err != nil {
			stop()
			return err
		}
		t0 := time.Now()
		sampling := sampleRSSEvery(250 * time.Millisecond)
		err = monthsWindow1(ctx, store, nd.Commands, head, w*per, min(per, *n-w*per), *actions, *submitters, *inFlight)
		rssMedian := sampling()
		if err != nil {
			stop()
			return err
		}
		rate := float64(min(per, *n-w*per)) / time.Since(t0).Seconds()
		// Let the archiver catch up with what the window left behind.
		time.Sleep(*after + *every)
		var m monthsWindow
		m.Window, m.ExecutionsPerS = w+1, round(rate, 1)
		m.Events, _ = store.Head(ctx)
		m.LiveStart, _, _ = store.Start(ctx)
		m.RSSBytes, m.RSSMedianBytes = currentRSS(), rssMedian
		if cps, err := projections.CheckpointMarkers(ctx, store); err == nil && len(cps) > 0 {
			m.Checkpoint = cps[len(cps)-1].Position
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		m.HeapBytes = ms.HeapAlloc
		if strings.Contains(*memProfile, "%d") {
			if err := writeHeapProfile(fmt.Sprintf(*memProfile, m.Window)); err != nil {
				stop()
				return err
			}
		}
		debug.FreeOSMemory()
		m.RSSFreedBytes = currentRSS()
		stop()
		m.LiveBytes, m.ArchiveBytes = dirBytes(dataDir), dirBytes(archDir)
		m.ArchiveEvents = arch.End() - arch.First()
		took, err := start()
		if err != nil {
			return err
		}
		m.RestartSeconds = round(took.Seconds(), 3)
		if *asJSON {
			b, _ := json.Marshal(m)
			fmt.Fprintln(stdout, string(b))
		} else {
			perEvent := 0.0
			if m.ArchiveEvents > 0 {
				perEvent = float64(m.ArchiveBytes) / float64(m.ArchiveEvents)
			}
			fmt.Fprintf(stdout, "%6d %12d %12d %12.1f %14.1f %10.0f %9.1f %9.1f %9.1f %9.1f %10.3f %10d\n", m.Window, m.Events, m.LiveStart,
				float64(m.LiveBytes)/(1<<20), perEvent, m.ExecutionsPerS, float64(m.RSSBytes)/(1<<20), float64(m.RSSMedianBytes)/(1<<20), float64(m.RSSFreedBytes)/(1<<20), float64(m.HeapBytes)/(1<<20), m.RestartSeconds, m.Checkpoint)
		}
	}
	if *memProfile != "" && !strings.Contains(*memProfile, "%d") { // the restarted process's, after the last window
		if err := writeHeapProfile(*memProfile); err != nil {
			stop()
			return err
		}
	}
	stop()
	return nil
}

// monthsWindow1 requests count executions (numbered from first) and waits
// until they have all ended, counting ends from the log from head. With
// inFlight > 0 at most that many are requested and not yet ended at once.
func monthsWindow1(ctx context.Context, store eventstore.Store, cmds *command.Service, head uint64, first, count, actions, submitters, inFlight int) error {
	var ended atomic.Int64
	var slots chan struct{} // a token per requested execution not yet ended
	if inFlight > 0 {
		slots = make(chan struct{}, inFlight)
	}
	done := make(chan struct{})
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	subErr := make(chan error, 1)
	go func() {
		subErr <- store.Subscribe(subCtx, head, eventstore.Filter{Types: []string{domain.TypeExecutionCompleted, domain.TypeExecutionFailed,
			domain.TypeExecutionTimedOut, domain.TypeExecutionCancelled, domain.TypeExecutionRejected}}, func(b []domain.Envelope) error {
			if slots != nil {
				for range b {
					<-slots
				}
			}
			if ended.Add(int64(len(b))) >= int64(count) {
				close(done)
				return errors.New("done")
			}
			return nil
		})
	}()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, submitters)
	for range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(count) {
					return
				}
				if slots != nil {
					select {
					case slots <- struct{}{}:
					case <-subCtx.Done():
						return
					}
				}
				k := int64(first) + i
				if _, _, err := cmds.Request(ctx, command.Request{Action: "bench." + strconv.FormatInt(k%int64(actions), 10)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("request: %w", err)
	}
	select {
	case <-done:
		return nil
	case err := <-subErr:
		return fmt.Errorf("count ends: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dirBytes is the size of the files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// sampleRSSEvery samples the resident set every interval until the returned
// function is called, which stops it and returns the samples' median.
func sampleRSSEvery(every time.Duration) func() int64 {
	var samples []int64
	stopped, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			samples = append(samples, currentRSS())
			select {
			case <-t.C:
			case <-stopped:
				return
			}
		}
	}()
	return func() int64 {
		close(stopped)
		<-done
		slices.Sort(samples)
		return samples[len(samples)/2]
	}
}

// currentRSS returns the process's resident set size (VmRSS), 0 if unknown.
func currentRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}
