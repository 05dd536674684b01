package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/diskfs"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		opts Options
		ok   bool
	}{
		{"zero", Options{}, true},
		{"all set", Options{MaxBatch: 10, CheckpointEvery: 5, Preallocate: 1 << 20, GroupCommitWait: time.Millisecond, NoSync: true, TrustIndex: true}, true},
		{"disabled extras", Options{CheckpointEvery: -1, Preallocate: -1, GroupCommitWait: -1}, true},
		{"negative MaxBatch", Options{MaxBatch: -1}, false},
		{"huge MaxBatch", Options{MaxBatch: 2_000_000}, false},
		{"huge Preallocate", Options{Preallocate: 2 << 30}, false},
		{"huge GroupCommitWait", Options{GroupCommitWait: time.Second}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := c.opts.Validate()
			if (err == nil) != c.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, c.ok)
			}
			dir := filepath.Join(t.TempDir(), "data")
			s, err := Open(dir, c.opts)
			if (err == nil) != c.ok {
				t.Fatalf("Open = %v, want ok=%v", err, c.ok)
			}
			if err != nil {
				if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
					t.Fatalf("Open with invalid options created %s", dir)
				}
				return
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestOpenCreatesDirectory(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a", "b")
	s := openT(t, dir, Options{})
	if h, err := s.Head(ctxT(t)); err != nil || h != 0 {
		t.Fatalf("Head of a new store = %d, %v", h, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, logName))
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:headerSize]) != string(logHeader()) {
		t.Fatalf("log starts with %q, want the header %q", b[:headerSize], logHeader())
	}
	if _, err := os.Stat(filepath.Join(dir, lockName)); err != nil {
		t.Fatalf("no lock file: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// An empty existing directory is initialised too, and a closed empty
	// store reopens.
	empty := t.TempDir()
	requireClose(t, openT(t, empty, Options{}))
	requireClose(t, openT(t, empty, Options{}))
}

func TestOpenRefusesForeignDirectory(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		files map[string]string
		want  error
	}{
		{"other files", map[string]string{"notes.txt": "hello"}, eventstore.ErrNotOurs},
		{"other files and our lock", map[string]string{"notes.txt": "hello", lockName: ""}, eventstore.ErrNotOurs},
		{"foreign log", map[string]string{logName: "SQLite format 3\x00 and more bytes"}, eventstore.ErrNotOurs},
		{"short log", map[string]string{logName: "TRNST"}, eventstore.ErrNotOurs},
		{"empty log", map[string]string{logName: ""}, eventstore.ErrNotOurs},
		{"newer format", map[string]string{logName: logMagic + logKind + "\x03\x00\x00\x00"}, eventstore.ErrNotOurs},
		{"index without log", map[string]string{sealedName: "x"}, eventstore.ErrCorrupt},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for name, content := range c.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			before := dirState(t, dir)
			s, err := Open(dir, Options{})
			if err == nil {
				_ = s.Close()
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("Open = %v, want %v", err, c.want)
			}
			if after := dirState(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("Open changed the directory:\nbefore %q\nafter  %q", before, after)
			}
		})
	}
}

func TestOpenLocked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	mustAppend(t, s, "execution-1", eventstore.NoStream, ev("test.a", 0))
	for range 2 {
		if s2, err := Open(dir, Options{}); !errors.Is(err, eventstore.ErrLocked) {
			if err == nil {
				_ = s2.Close()
			}
			t.Fatalf("second Open of a directory in use = %v, want ErrLocked", err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, Options{})
	if h, _ := s.Head(ctxT(t)); h != 1 {
		t.Fatalf("Head after reopen = %d, want 1", h)
	}
}

// TestReopen writes, stops the store in different ways, and checks that the
// reopened store has every event, field for field, and carries on.
func TestReopen(t *testing.T) {
	t.Parallel()
	closeIt := func(t *testing.T, s *Store) { requireClose(t, s) }
	crashIt := func(_ *testing.T, s *Store) { crash(s) }
	for _, c := range []struct {
		name    string
		more    func(t *testing.T, s *Store) // after the first events
		stop    func(t *testing.T, s *Store)
		opts    Options
		dropIdx bool
	}{
		{name: "close", stop: closeIt},
		{name: "close/trust index", stop: closeIt, opts: Options{TrustIndex: true}},
		{name: "close/no index", stop: closeIt, dropIdx: true},
		{name: "crash", stop: crashIt},
		{name: "crash/no preallocation", stop: crashIt, opts: Options{Preallocate: -1}},
		{name: "crash after checkpoint", more: func(t *testing.T, s *Store) {
			sealNow(t, s)
			mustAppend(t, s, "execution-late", eventstore.NoStream, richEvent(1), richEvent(2))
			mustAppend(t, s, "execution-1", eventstore.Any, richEvent(3))
		}, stop: crashIt},
		{name: "crash after checkpoint/trust index", more: func(t *testing.T, s *Store) {
			sealNow(t, s)
			mustAppend(t, s, "execution-late", eventstore.NoStream, richEvent(1), richEvent(2))
		}, stop: crashIt, opts: Options{TrustIndex: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := openT(t, dir, c.opts)
			writeMixed(t, s, 60)
			if c.more != nil {
				c.more(t, s)
			}
			written := readAllT(t, s)
			c.stop(t, s)
			if c.dropIdx {
				if err := removeLevels(t, dir); err != nil {
					t.Fatal(err)
				}
			}
			s = openT(t, dir, c.opts)
			requireEvents(t, "after reopen", written, readAllT(t, s))
			for _, name := range []string{"execution-1", "queue-demo.sleep"} {
				requireStream(t, s, "after reopen", name, written)
			}
			// It carries on: versions and positions continue, old ids are
			// still known.
			last := written[len(written)-1]
			res := mustAppend(t, s, last.Stream, eventstore.Exact(last.Version), ev("test.after", 0))
			if res.Version != last.Version+1 || res.Position != uint64(len(written)) {
				t.Fatalf("append after reopen landed at %+v, want version %d position %d", res, last.Version+1, len(written))
			}
			again, err := s.Append(ctxT(t), last.Stream, eventstore.NoStream, withoutStoreFields(last))
			if err != nil || again.Position != last.Position || again.Version != last.Version {
				t.Fatalf("re-append of an event stored before reopen = %+v, %v; want its original place", again, err)
			}
			if _, err := s.Append(ctxT(t), "execution-other", eventstore.Any, withoutStoreFields(written[0])); !errors.Is(err, eventstore.ErrIdempotencyConflict) {
				t.Fatalf("append of a stored id to another stream after reopen = %v, want ErrIdempotencyConflict", err)
			}
			requireClose(t, s)
			s = openT(t, dir, c.opts)
			if h, _ := s.Head(ctxT(t)); h != uint64(len(written)+1) {
				t.Fatalf("Head after second reopen = %d, want %d", h, len(written)+1)
			}
		})
	}
}

func requireClose(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// readBack opens dir, reads the whole log and closes it again.
func readBack(t testing.TB, dir string) []domain.Envelope {
	t.Helper()
	s := openT(t, dir, Options{})
	defer requireClose(t, s)
	return readAllT(t, s)
}

func withoutStoreFields(e domain.Envelope) domain.Envelope {
	e.Stream, e.Version, e.Position, e.Time = "", 0, 0, time.Time{}
	return e
}

func TestCommitTimeFromClock(t *testing.T) {
	t.Parallel()
	zone := time.FixedZone("X", 3*3600)
	now := time.Date(2030, 5, 6, 7, 8, 9, 123456789, zone)
	var mu sync.Mutex
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	dir := t.TempDir()
	s := openT(t, dir, Options{Clock: clock})
	mustAppend(t, s, "execution-t", eventstore.NoStream, ev("test.t", 0), ev("test.t", 1))
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	mustAppend(t, s, "execution-t", eventstore.Exact(1), ev("test.t", 2))
	got := readAllT(t, s)
	want0 := time.Date(2030, 5, 6, 4, 8, 9, 123456000, time.UTC)
	for i, w := range []time.Time{want0, want0, want0.Add(time.Hour)} {
		if got[i].Time != w || got[i].Time.Location() != time.UTC {
			t.Fatalf("event %d has Time %v (%v), want %v in UTC, truncated to µs", i, got[i].Time, got[i].Time.Location(), w)
		}
	}
	requireClose(t, s)
	requireEvents(t, "after reopen", got, readBack(t, dir))
}

// TestGroupCommit: concurrent appends share writes and fsyncs, and every one
// of them is durable and in place.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	const writers, each = 32, 20
	var wg sync.WaitGroup
	results := make([][]eventstore.AppendResult, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				expected := eventstore.NoStream
				if i > 0 {
					expected = eventstore.Exact(uint64(i - 1))
				}
				res, err := s.Append(ctxT(t), fmt.Sprintf("worker-%d", w), expected, ev("test.g", i))
				if err != nil {
					t.Error(err)
					return
				}
				results[w] = append(results[w], res)
			}
		})
	}
	waitT(t, &wg, "32 writers", nil)
	if t.Failed() {
		return
	}
	if w := s.writes.Load(); w >= writers*each {
		t.Errorf("%d appends took %d writes: no group commit", writers*each, w)
	}
	all := readAllT(t, s)
	if len(all) != writers*each {
		t.Fatalf("log holds %d events, want %d", len(all), writers*each)
	}
	for w, rs := range results {
		for i, r := range rs {
			e := all[r.Position]
			if e.Stream != fmt.Sprintf("worker-%d", w) || e.Version != uint64(i) || r.Version != uint64(i) {
				t.Fatalf("writer %d append %d returned %+v but position %d holds %s v%d", w, i, r, r.Position, e.Stream, e.Version)
			}
		}
	}
}

// TestConcurrentReappend: the same event appended by many goroutines at once
// (in one group commit or several) is stored once, and every call gets its
// place.
func TestConcurrentReappend(t *testing.T) {
	t.Parallel()
	s := openT(t, t.TempDir(), Options{})
	mustAppend(t, s, "execution-x", eventstore.NoStream, ev("test.pre", 0))
	for round := range 5 {
		e1, e2 := ev("test.same", round), ev("test.same", round)
		var wg sync.WaitGroup
		results := make([]eventstore.AppendResult, 16)
		for g := range results {
			wg.Go(func() {
				res, err := s.Append(ctxT(t), "execution-x", eventstore.Any, e1, e2)
				if err != nil {
					t.Errorf("append %d: %v", g, err)
				}
				results[g] = res
			})
		}
		waitT(t, &wg, fmt.Sprintf("round %d: 16 appends of the same events", round), nil)
		for _, r := range results {
			if r != results[0] {
				t.Fatalf("round %d: results differ: %+v", round, results)
			}
		}
	}
	if got := readAllT(t, s); len(got) != 11 {
		t.Fatalf("log holds %d events, want 11", len(got))
	}
}

func TestReadLargeAndScattered(t *testing.T) {
	t.Parallel()
	s := openT(t, t.TempDir(), Options{NoSync: true})
	big := func(n int, c byte) domain.Envelope {
		return storetest.NewEvent("test.big", json.RawMessage(`"`+strings.Repeat(string(c), n)+`"`))
	}
	var wantStream []string
	for i := range 40 {
		var e domain.Envelope
		switch {
		case i%10 == 3:
			e = big(eventstore.MaxEventSize-2, byte('a'+i%26)) // larger than a read chunk
		case i%3 == 0:
			e = big(300_000, byte('a'+i%26))
		default:
			e = ev("test.small", i)
		}
		mustAppend(t, s, "execution-target", eventstore.Any, e)
		wantStream = append(wantStream, string(e.Data))
		for j := range i % 4 {
			mustAppend(t, s, "queue-noise", eventstore.Any, ev("test.noise", j))
		}
	}
	all := readAllT(t, s)
	var fromAll []string
	for i, e := range all {
		if e.Position != uint64(i) {
			t.Fatalf("ReadAll: event %d has position %d", i, e.Position)
		}
		if e.Stream == "execution-target" {
			fromAll = append(fromAll, string(e.Data))
		}
	}
	for _, limit := range []int{1, 3, 1000} {
		var got []string
		for {
			page, err := s.ReadStream(ctxT(t), "execution-target", uint64(len(got)), limit)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range page {
				got = append(got, string(e.Data))
			}
			if len(page) < limit {
				break
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(wantStream) || fmt.Sprint(fromAll) != fmt.Sprint(wantStream) {
			t.Fatalf("limit %d: stream read back differs from what was written", limit)
		}
	}
	if evs, err := s.ReadAll(ctxT(t), 0, 0); err != nil || len(evs) != 0 {
		t.Fatalf("ReadAll with limit 0 = %d events, %v", len(evs), err)
	}
	if evs, err := s.ReadStream(ctxT(t), "execution-target", 0, -1); err != nil || len(evs) != 0 {
		t.Fatalf("ReadStream with limit -1 = %d events, %v", len(evs), err)
	}
}

// TestWriteFailureStopsAppends: after a failed write the store refuses every
// append (it cannot know what reached the disk), still serves what was
// committed, and a reopen recovers the committed events only.
func TestWriteFailureStopsAppends(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openT(t, dir, Options{Preallocate: -1, SegmentBytes: DefaultSegmentBytes})
	written := writeMixed(t, s, 10)
	// Swap the log for a read-only handle: the next write fails.
	last := s.f.last()
	rw := last.f
	ro, err := os.Open(filepath.Join(dir, logName))
	if err != nil {
		t.Fatal(err)
	}
	last.f = diskfs.OSFile(ro)
	for i := range 2 {
		_, err := s.Append(ctxT(t), "execution-1", eventstore.Any, ev("test.fail", i))
		if err == nil || errors.Is(err, eventstore.ErrWrongExpectedVersion) {
			t.Fatalf("append %d after a write failure = %v, want the write error", i, err)
		}
	}
	requireEvents(t, "reads after a write failure", written, readAllT(t, s))
	if h, _ := s.Head(ctxT(t)); h != uint64(len(written)) {
		t.Fatalf("Head after a failed write = %d, want %d", h, len(written))
	}
	_ = s.Close() // may report the failed state
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
	requireEvents(t, "after reopen", written, readBack(t, dir))
}

func TestCloseEndsEverything(t *testing.T) {
	t.Parallel()
	s := openT(t, t.TempDir(), Options{})
	mustAppend(t, s, "execution-c", eventstore.NoStream, ev("test.c", 0))
	// Many appends in flight while Close runs: each either lands or gets
	// ErrClosed, never hangs.
	var wg sync.WaitGroup
	var landed sync.Map
	for g := range 32 {
		wg.Go(func() {
			for i := 0; ; i++ {
				res, err := s.Append(context.Background(), fmt.Sprintf("worker-%d", g), eventstore.Any, ev("test.c", i))
				if errors.Is(err, eventstore.ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
				landed.Store(res.Position, true)
			}
		})
	}
	subErr := make(chan error, 1)
	go func() {
		subErr <- s.Subscribe(context.Background(), 0, eventstore.Filter{}, func([]domain.Envelope) error { return nil })
	}()
	time.Sleep(20 * time.Millisecond)
	requireClose(t, s)
	waitT(t, &wg, "writers racing Close", nil)
	if err := recvT(t, subErr, "Subscribe across Close", nil); !errors.Is(err, eventstore.ErrClosed) {
		t.Fatalf("Subscribe after Close = %v, want ErrClosed", err)
	}
	n := 0
	landed.Range(func(any, any) bool { n++; return true })
	got := readBack(t, s.dir)
	if len(got) != n+1 {
		t.Fatalf("%d appends succeeded before Close, the log holds %d events", n+1, len(got))
	}
}

// TestMaxBatch: with a small MaxBatch, group commits are written in chunks
// of at most that many events (an append larger than that alone), and every
// append still lands whole and contiguous.
func TestMaxBatch(t *testing.T) {
	t.Parallel()
	s := openT(t, t.TempDir(), Options{MaxBatch: 4})
	var wg sync.WaitGroup
	type landed struct {
		res eventstore.AppendResult
		n   int
	}
	results := make(chan landed, 1000)
	for g := range 16 {
		wg.Go(func() {
			for i := range 10 {
				n := 1 + (g+i)%3
				if g == 0 && i == 5 {
					n = 10 // larger than MaxBatch
				}
				evs := make([]domain.Envelope, n)
				for j := range evs {
					evs[j] = ev("test.mb", j)
				}
				res, err := s.Append(ctxT(t), fmt.Sprintf("worker-%d", g), eventstore.Any, evs...)
				if err != nil {
					t.Error(err)
					return
				}
				results <- landed{res, n}
			}
		})
	}
	waitT(t, &wg, "writers", nil)
	close(results)
	all := readAllT(t, s)
	total := 0
	for l := range results {
		total += l.n
		first := l.res.Position - uint64(l.n) + 1
		for p := first; p <= l.res.Position; p++ {
			if all[p].Stream != all[first].Stream || all[p].Version != all[first].Version+(p-first) {
				t.Fatalf("append ending at %d (%d events) is not contiguous", l.res.Position, l.n)
			}
		}
	}
	if len(all) != total {
		t.Fatalf("log holds %d events, appends returned %d", len(all), total)
	}
	if w := s.writes.Load(); w < uint64((total-10)/4+1) { // 10: the one append larger than MaxBatch
		t.Fatalf("%d events in %d writes: more than MaxBatch per write", total, w)
	}
}
