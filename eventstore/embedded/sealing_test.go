package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/diskfs"
	"github.com/turnstile/turnstile/eventstore/memstore"
)

// modelRun drives an embedded store and a memstore with the same random
// appends and compares every answer and every read. The embedded store
// seals every few events, is sealed by hand at random points and is
// restarted (closed or crashed) now and then, so that appends, replays,
// version checks and reads all meet streams and ids on both sides of the
// sealed/hot boundary.
type modelRun struct {
	t       *testing.T
	rnd     *rand.Rand
	dir     string
	opts    Options
	s       *Store
	seals   uint64 // installed by the stores closed so far
	dirty   bool   // events were appended since the last seal by hand
	manual  uint64 // seals by hand that had new events to seal
	m       *memstore.Store
	streams []string
	done    [][]eventstore.StreamAppend // accepted appends, to replay
	n       int                         // events made

	subStop context.CancelFunc
	subDone chan []domain.Envelope
}

func fixedClock() time.Time { return time.Date(2026, 11, 21, 20, 0, 0, 123456000, time.UTC) }

func TestSealingAgreesWithMemstore(t *testing.T) {
	t.Parallel()
	for seed := range uint64(3) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			ops := 1500
			if testing.Short() {
				ops = 500
			}
			r := &modelRun{t: t, rnd: rand.New(rand.NewPCG(seed, 7)), dir: t.TempDir(),
				opts: Options{HotEvents: 7, NoSync: true, Clock: fixedClock, TrustIndex: seed == 2, Preallocate: -1},
				m:    memstore.New(memstore.Options{Clock: fixedClock})}
			for i := range 40 {
				r.streams = append(r.streams, fmt.Sprintf("execution-%d", i))
			}
			r.open()
			for i := range ops {
				r.step()
				switch k := r.rnd.IntN(100); {
				case k < 3:
					sealNow(t, r.s)
					if r.dirty {
						r.manual, r.dirty = r.manual+1, false
					}
				case k < 5:
					r.restart(r.rnd.IntN(2) == 0)
				}
				if i%100 == 99 {
					r.compare()
				}
			}
			r.compare()
			r.restart(false)
			r.compare()
			r.stopSub()
			// Each seal by hand with new events installs at least one
			// (its own or one that ran in the background meanwhile).
			if r.seals += r.s.seals.Load(); r.seals < r.manual || r.manual < 5 {
				t.Fatalf("%d seals installed, %d by hand with new events; want at least that and 5", r.seals, r.manual)
			}
			t.Logf("%d events, %d seals installed", r.n, r.seals)
			requireClose(t, r.s)
		})
	}
}

func (r *modelRun) open() {
	r.s = openT(r.t, r.dir, r.opts)
	ctx, cancel := context.WithCancel(context.Background())
	r.subStop, r.subDone = cancel, make(chan []domain.Envelope, 1)
	head, _ := r.s.Head(ctx)
	from := uint64(r.rnd.Int64N(int64(head) + 1))
	s := r.s
	go func() {
		var got []domain.Envelope
		_ = s.Subscribe(ctx, from, eventstore.Filter{}, func(b []domain.Envelope) error {
			got = append(got, b...)
			return nil
		})
		if from > 0 || len(got) > 0 {
			got = append([]domain.Envelope{{Position: from}}, got...) // first: where it started
		}
		r.subDone <- got
	}()
}

// stopSub ends the subscription and checks it saw the log from where it
// started, in order.
func (r *modelRun) stopSub() {
	r.t.Helper()
	// Wait until the subscription has had a chance to catch up, then stop it.
	r.subStop()
	got := recvT(r.t, r.subDone, "the model run's subscription after cancel", nil)
	if len(got) == 0 {
		return
	}
	from, got := got[0].Position, got[1:]
	want, err := r.m.ReadAll(context.Background(), from, len(got))
	if err != nil {
		r.t.Fatal(err)
	}
	requireEvents(r.t, fmt.Sprintf("subscription from %d", from), want, got)
}

func (r *modelRun) restart(crashIt bool) {
	r.t.Helper()
	r.stopSub()
	r.seals += r.s.seals.Load()
	r.dirty = false // conservative: after a Close there is nothing left to seal
	if crashIt {
		crash(r.s)
	} else {
		requireClose(r.t, r.s)
		r.s = openT(r.t, r.dir, r.opts)
		if h, _ := r.s.Head(ctxT(r.t)); r.s.loadedSealed != h {
			r.t.Fatalf("after Close, Open found %d of %d events sealed", r.s.loadedSealed, h)
		}
		requireClose(r.t, r.s)
	}
	r.open()
}

func (r *modelRun) event() domain.Envelope {
	r.n++
	return richEvent(r.n)
}

func (r *modelRun) expected(stream string) eventstore.ExpectedVersion {
	got, err := r.m.ReadStream(context.Background(), stream, 0, 1<<30)
	exists := err == nil
	switch r.rnd.IntN(6) {
	case 0:
		return eventstore.NoStream
	case 1:
		return eventstore.StreamExists
	case 2:
		if exists && r.rnd.IntN(2) == 0 {
			return eventstore.Exact(uint64(len(got) - 1))
		}
		return eventstore.Exact(uint64(r.rnd.IntN(8)))
	case 3:
		if exists {
			return eventstore.Exact(uint64(len(got) - 1))
		}
		return eventstore.NoStream
	}
	return eventstore.Any
}

// step makes one random append (new, replayed or conflicting) on both
// stores and compares the outcomes.
func (r *modelRun) step() {
	r.t.Helper()
	var appends []eventstore.StreamAppend
	switch k := r.rnd.IntN(100); {
	case k < 10 && len(r.done) > 0: // replay an accepted append
		appends = r.done[r.rnd.IntN(len(r.done))]
	case k < 15 && len(r.done) > 0: // a stored id in another stream, or mixed with new ones
		old := r.done[r.rnd.IntN(len(r.done))]
		e := old[0].Events[0]
		stream := r.streams[r.rnd.IntN(len(r.streams))]
		evs := []domain.Envelope{e}
		if r.rnd.IntN(2) == 0 {
			stream = old[0].Stream
			evs = append(evs, r.event())
		}
		appends = []eventstore.StreamAppend{{Stream: stream, Expected: eventstore.Any, Events: evs}}
	case k < 25: // two streams at once
		a, b := r.streams[r.rnd.IntN(len(r.streams))], r.streams[r.rnd.IntN(len(r.streams))]
		appends = []eventstore.StreamAppend{
			{Stream: a, Expected: r.expected(a), Events: []domain.Envelope{r.event()}},
			{Stream: b, Expected: eventstore.Any, Events: []domain.Envelope{r.event(), r.event()}},
		}
	default:
		stream := r.streams[r.rnd.IntN(len(r.streams))]
		evs := make([]domain.Envelope, 1+r.rnd.IntN(3))
		for i := range evs {
			evs[i] = r.event()
		}
		appends = []eventstore.StreamAppend{{Stream: stream, Expected: r.expected(stream), Events: evs}}
	}
	ctx := ctxT(r.t)
	want, werr := r.m.AppendMulti(ctx, appends...)
	got, gerr := r.s.AppendMulti(ctx, appends...)
	if kind(werr) != kind(gerr) || werr == nil && got != want {
		r.t.Fatalf("AppendMulti(%+v):\n embedded %+v, %v\n memstore %+v, %v", appends, got, gerr, want, werr)
	}
	var wv *eventstore.WrongVersionError
	if errors.As(werr, &wv) {
		var gv *eventstore.WrongVersionError
		if errors.As(gerr, &gv); *gv != *wv {
			r.t.Fatalf("wrong version: embedded %+v, memstore %+v", *gv, *wv)
		}
	}
	if werr == nil {
		r.done = append(r.done, appends)
		r.dirty = true
	}
}

func kind(err error) string {
	var wv *eventstore.WrongVersionError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &wv):
		return "wrong version"
	case errors.Is(err, eventstore.ErrIdempotencyConflict):
		return "conflict"
	case errors.Is(err, eventstore.ErrStreamNotFound):
		return "not found"
	}
	return err.Error()
}

// compare checks Head, the whole log and every stream (from a random
// version, with a random limit) against the memstore.
func (r *modelRun) compare() {
	r.t.Helper()
	ctx := ctxT(r.t)
	want, _ := r.m.ReadAll(ctx, 0, 1<<30)
	requireEvents(r.t, "ReadAll", want, readAllT(r.t, r.s))
	if h, _ := r.s.Head(ctx); h != uint64(len(want)) {
		r.t.Fatalf("Head = %d, want %d", h, len(want))
	}
	from := uint64(r.rnd.IntN(len(want) + 1))
	got, err := r.s.ReadAll(ctx, from, 1+r.rnd.IntN(50))
	if err != nil {
		r.t.Fatal(err)
	}
	requireEvents(r.t, fmt.Sprintf("ReadAll from %d", from), want[from:from+uint64(len(got))], got)
	for _, name := range append(r.streams, "execution-never") {
		w, werr := r.m.ReadStream(ctx, name, 0, 1<<30)
		g, gerr := r.s.ReadStream(ctx, name, 0, 1<<30)
		if kind(werr) != kind(gerr) {
			r.t.Fatalf("ReadStream(%q): embedded %v, memstore %v", name, gerr, werr)
		}
		requireEvents(r.t, "ReadStream "+name, w, g)
		if len(w) == 0 {
			continue
		}
		v, limit := uint64(r.rnd.IntN(len(w)+1)), 1+r.rnd.IntN(5)
		w, _ = r.m.ReadStream(ctx, name, v, limit)
		g, err := r.s.ReadStream(ctx, name, v, limit)
		if err != nil {
			r.t.Fatal(err)
		}
		requireEvents(r.t, fmt.Sprintf("ReadStream %s from %d limit %d", name, v, limit), w, g)
	}
}

// TestSealCrash: a crash between writing sealed.tmp and renaming it, or a
// sealed file that is torn, garbled or empty, leaves Open with the same log
// (the damaged file is ignored and the log scanned), which then carries on.
func TestSealCrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openT(t, dir, Options{HotEvents: -1, NoSync: true, SegmentBytes: DefaultSegmentBytes})
	writeMixed(t, s, 40)
	sealNow(t, s)
	before := dirState(t, dir) // log and the sealed file of 40 events
	for i := range 25 {
		mustAppend(t, s, fmt.Sprintf("execution-%d", i%9), eventstore.Any, richEvent(100+i))
	}
	sealNow(t, s)
	written := readAllT(t, s)
	crash(s)
	after := dirState(t, dir)
	// The first seal wrote the level of positions [0, 40), the second one
	// that of [40, 65), leaving the first as it was.
	oldLevel, newName := []byte(before[levelName(0, 40)]), levelName(40, 65)
	if len(oldLevel) == 0 || after[levelName(0, 40)] != string(oldLevel) {
		t.Fatalf("the first level changed or is missing: %v", levelFiles(t, dir))
	}
	newSealed := []byte(after[newName])
	for _, c := range []struct {
		name   string
		sealed []byte // the second level (nil: none)
		tmp    []byte // its temporary file (nil: none)
		used   uint64
	}{
		{"killed before rename", nil, newSealed, 40},
		{"killed while writing tmp", nil, newSealed[:len(newSealed)/3], 40},
		{"torn", newSealed[:len(newSealed)-7], nil, 40},
		{"half", newSealed[:len(newSealed)/2], nil, 40},
		{"garbled ids", flip(newSealed, int64(len(newSealed)/2)), nil, 40},
		{"garbled footer", flip(newSealed, int64(len(newSealed)-20)), nil, 40},
		{"empty", []byte{}, nil, 40},
		{"intact", newSealed, nil, 65},
	} {
		for _, trust := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/trust=%v", c.name, trust), func(t *testing.T) {
				t.Parallel()
				d := t.TempDir()
				if err := os.WriteFile(filepath.Join(d, logName), []byte(after[logName]), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(d, levelName(0, 40)), oldLevel, 0o644); err != nil {
					t.Fatal(err)
				}
				if c.sealed != nil {
					if err := os.WriteFile(filepath.Join(d, newName), c.sealed, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if c.tmp != nil {
					if err := os.WriteFile(filepath.Join(d, newName+tmpSuffix), c.tmp, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				opts := Options{HotEvents: 5, NoSync: true, TrustIndex: trust}
				s := openT(t, d, opts)
				if s.loadedSealed != c.used {
					t.Fatalf("Open used a sealed file of %d events, want %d", s.loadedSealed, c.used)
				}
				requireEvents(t, "after Open", written, readAllT(t, s))
				for i := range 9 {
					requireStream(t, s, "after Open", fmt.Sprintf("execution-%d", i), written)
				}
				// It carries on, and knows every old id.
				first := written[0]
				if res, err := s.Append(ctxT(t), first.Stream, eventstore.Any, withoutStoreFields(first)); err != nil || res.Position != 0 {
					t.Fatalf("re-append of the first event = %+v, %v; want position 0", res, err)
				}
				mustAppend(t, s, "execution-1", eventstore.Any, ev("test.after", 0))
				requireClose(t, s)
				s = openT(t, d, opts)
				if s.loadedSealed != uint64(len(written)+1) {
					t.Fatalf("after Close, Open found %d events sealed, want %d", s.loadedSealed, len(written)+1)
				}
				requireEvents(t, "after reopen", written, readAllT(t, s)[:len(written)])
			})
		}
	}
}

// TestSealingTrimsMemory: once sealed, the hot structures hold only what
// came after the seal, and the sealed part keeps about 1.5 bytes per event
// in memory (its fences and filters).
func TestSealingTrimsMemory(t *testing.T) {
	t.Parallel()
	const n, streams = 30_000, 5_000
	dir := t.TempDir()
	s := openT(t, dir, Options{HotEvents: -1, NoSync: true})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				e := ev("test.small", i)
				if _, err := s.Append(context.Background(), fmt.Sprintf("execution-%d", i%streams), eventstore.Any, e); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	waitT(t, &wg, "8 writers", nil)
	sealNow(t, s)
	mustAppend(t, s, "execution-new", eventstore.NoStream, ev("test.after", 0))
	mustAppend(t, s, "execution-7", eventstore.Exact(n/streams-1), ev("test.after", 1))
	s.mu.RLock()
	hot, hotStreams, mem := len(s.offsets), len(s.streams), s.sealed.memory()
	s.mu.RUnlock()
	if hot != 2 || hotStreams != 2 {
		t.Fatalf("after the seal: %d hot events in %d streams, want 2 in 2", hot, hotStreams)
	}
	if perEvent := float64(mem) / n; perEvent > 2 {
		t.Fatalf("the sealed part keeps %.2f bytes per event in memory, want at most 2", perEvent)
	}
	// New ids in new streams: the filters answer nearly all of them
	// without reading the sealed file (about 1 to 2 % false positives).
	before := s.lookups.Load()
	for i := range 500 {
		mustAppend(t, s, fmt.Sprintf("execution-fresh-%d", i), eventstore.NoStream, ev("test.fresh", i))
	}
	if reads := s.lookups.Load() - before; reads > 50 {
		t.Fatalf("500 appends of new ids to new streams read the sealed file %d times", reads)
	} else {
		t.Logf("500 appends of new ids to new streams: %d reads of the sealed file", reads)
	}
	got, err := s.ReadStream(ctxT(t), "execution-7", 0, 100)
	if err != nil || len(got) != n/streams+1 || got[len(got)-1].Type != "test.after" {
		t.Fatalf("ReadStream across the boundary: %d events, %v", len(got), err)
	}
	if !slices.IsSortedFunc(got, func(a, b domain.Envelope) int { return int(a.Version) - int(b.Version) }) {
		t.Fatal("ReadStream out of order")
	}
}

// TestSealFailure: when the sealed file cannot be written, appends and
// reads go on (the hot part keeps everything), the failure is logged, Close
// reports it, and the next Open scans the log.
func TestSealFailure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A file system on which creating a level file fails.
	fsys := &failCreate{FS: diskfs.OS{}, prefix: filepath.Join(dir, levelPrefix)}
	logs := &logRecorder{}
	s, err := OpenFS(fsys, dir, Options{HotEvents: 5, NoSync: true, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		mustAppend(t, s, fmt.Sprintf("execution-%d", i%4), eventstore.Any, richEvent(i))
	}
	written := readAllT(t, s)
	if len(written) != 30 || s.sealedEvents() != 0 {
		t.Fatalf("%d events, %d sealed; want 30, 0", len(written), s.sealedEvents())
	}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.ContainsFunc(logs.messages(), func(m string) bool { return strings.Contains(m, "sealing the index failed") }) {
		if time.Now().After(deadline) {
			t.Fatalf("no failed seal logged: %q", logs.messages())
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err == nil || !strings.Contains(err.Error(), levelPrefix) {
		t.Fatalf("Close = %v, want the failed seal", err)
	}
	s = openT(t, dir, Options{NoSync: true})
	if s.loadedSealed != 0 {
		t.Fatalf("Open used a sealed file of %d events; none was written", s.loadedSealed)
	}
	requireEvents(t, "after reopen", written, readAllT(t, s))
}

// TestReadersDuringSeals: readers that run while seals are installed (every
// few events) always see a consistent log, and a view taken before several
// seals still reads through the sealed file it started with, though that
// file has since been replaced.
func TestReadersDuringSeals(t *testing.T) {
	t.Parallel()
	s := openT(t, t.TempDir(), Options{HotEvents: 5, NoSync: true})
	for i := range 40 {
		mustAppend(t, s, fmt.Sprintf("execution-%d", i%6), eventstore.Any, richEvent(i))
	}
	sealNow(t, s)
	mustAppend(t, s, "execution-1", eventstore.Any, richEvent(40))
	old := s.view() // 40 sealed, 1 hot
	if old.base != 40 || old.head != 41 {
		t.Fatalf("view: base %d head %d, want 40, 41", old.base, old.head)
	}

	const n, streams = 1000, 50
	var wg sync.WaitGroup
	done := make(chan struct{})
	type read struct{ evs []domain.Envelope }
	reads := make(chan read, 1<<12)
	progress := make(chan struct{}, 1) // a reader finished a read (the writer waits for one between seals)
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(r), 1))
			for {
				select {
				case <-done:
					return
				default:
				}
				head, _ := s.Head(context.Background())
				from := uint64(rnd.Int64N(int64(head)))
				evs, err := s.ReadAll(context.Background(), from, 1+rnd.IntN(300))
				if err != nil {
					t.Error(err)
					return
				}
				for i, e := range evs {
					if e.Position != from+uint64(i) {
						t.Errorf("ReadAll(%d): event %d at position %d", from, i, e.Position)
						return
					}
				}
				name := fmt.Sprintf("execution-%d", rnd.IntN(streams))
				st, err := s.ReadStream(context.Background(), name, 0, 1<<20)
				if err != nil && !errors.Is(err, eventstore.ErrStreamNotFound) {
					t.Error(err)
					return
				}
				for i, e := range st {
					if e.Version != uint64(i) || e.Stream != name || i > 0 && e.Position <= st[i-1].Position {
						t.Errorf("ReadStream(%s): event %d is version %d of %q at %d", name, i, e.Version, e.Stream, e.Position)
						return
					}
				}
				select {
				case reads <- read{append(evs, st...)}:
				default:
				}
				select {
				case progress <- struct{}{}:
				default:
				}
				time.Sleep(200 * time.Microsecond) // leave the writer some CPU
			}
		}()
	}
	for i := range n {
		mustAppend(t, s, fmt.Sprintf("execution-%d", i%streams), eventstore.Any, richEvent(100+i))
		if i%100 == 99 {
			sealNow(t, s) // besides the seals in the background
			// On a loaded machine the readers may not run at all while the
			// writer does: let at least one read land between two seals.
			select {
			case <-progress:
			case <-time.After(30 * time.Second):
				t.Fatalf("no reader finished a read in 30 s (append %d)", i)
			}
		}
	}
	close(done)
	waitT(t, &wg, "readers told to stop", nil)
	close(reads)
	if seals := s.seals.Load(); seals < n/100 {
		t.Fatalf("%d seals installed while writing, want at least %d", seals, n/100)
	}
	all := readAllT(t, s)
	checked := 0
	for r := range reads {
		for _, e := range r.evs {
			requireEvents(t, fmt.Sprintf("event at %d read during the seals", e.Position), all[e.Position:e.Position+1], []domain.Envelope{e})
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("the readers read nothing")
	}
	// The old view: its sealed file was replaced several times since.
	runtime.GC()
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	var got []domain.Envelope
	for from := uint64(0); from < old.head; {
		var err error
		if got, from, err = s.readRange(&old, from, old.head, bp, eventstore.Filter{}, got); err != nil {
			t.Fatalf("reading through a view from before the seals: %v", err)
		}
	}
	requireEvents(t, "through the old view", all[:old.head], got)
}

// TestSealsSpacedInABurst: a seal that would follow the last one within
// the spacing waits until the hot part has grown to sealBurst times its
// target; with no spacing, every target's worth of events seals.
func TestSealsSpacedInABurst(t *testing.T) {
	t.Parallel()
	waitSeals := func(s *Store, n uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for s.seals.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d seals installed, want %d", s.seals.Load(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	appendN := func(s *Store, n int) {
		for i := range n {
			mustAppend(t, s, fmt.Sprintf("execution-%d", i%3), eventstore.Any, richEvent(i))
		}
	}
	const target = 10
	s := openT(t, t.TempDir(), Options{HotEvents: target, NoSync: true})
	s.sealSpacing = time.Hour // before the first append: the committer reads it after
	appendN(s, target)
	waitSeals(s, 1) // the first seal is never held back
	appendN(s, sealBurst*target-1)
	time.Sleep(200 * time.Millisecond) // a seal asked for would be installed by now
	if n := s.seals.Load(); n != 1 {
		t.Fatalf("%d seals within the spacing with %d hot events, want 1", n, sealBurst*target-1)
	}
	appendN(s, 1)
	waitSeals(s, 2) // sealBurst times the target: no more waiting

	u := openT(t, t.TempDir(), Options{HotEvents: target, NoSync: true})
	u.sealSpacing = 0
	for i := range 3 {
		appendN(u, target)
		waitSeals(u, uint64(i+1))
	}
}

// failCreate is a file system on which creating a file whose path starts
// with prefix fails.
type failCreate struct {
	diskfs.FS
	prefix string
}

func (f *failCreate) Create(path string) (diskfs.File, error) {
	if strings.HasPrefix(path, f.prefix) {
		return nil, errors.New("simulated failure to create " + path)
	}
	return f.FS.Create(path)
}
