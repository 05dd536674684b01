package embedded

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/diskfs"
)

// trimLog is the log of the trim tests: n appends of one event each, where
// position i goes to queue-q if i%10 == 9 and to execution-(i/10) otherwise.
// So execution-k holds positions 10k..10k+8 (versions 0..8) and queue-q
// every tenth position.
func trimStream(i int) string {
	if i%10 == 9 {
		return "queue-q"
	}
	return fmt.Sprintf("execution-%d", i/10)
}

func trimEvents(n int) []domain.Envelope {
	evs := make([]domain.Envelope, n)
	for i := range evs {
		evs[i] = richEvent(i)
	}
	return evs
}

// appendTrimLog appends evs as trimLog says and returns them as read back.
func appendTrimLog(t testing.TB, s *Store, evs []domain.Envelope) []domain.Envelope {
	t.Helper()
	for i := range evs {
		mustAppend(t, s, trimStream(i), eventstore.Any, evs[i])
	}
	return readAllT(t, s)
}

// dirBytes is the size of the regular files in dir.
func dirBytes(t testing.TB, dir string) (int64, []string) { // a merge may remove a file meanwhile
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	var names []string
	for _, e := range entries {
		fi, err := e.Info()
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
		names = append(names, e.Name())
	}
	return n, names
}

// checkTrimmed checks a store trimmed at before with keep [queue-q,
// execution-5] from the log all (trimLog): what reads, what fails, and that
// the streams' versions go on.
func checkTrimmed(t *testing.T, what string, s *Store, all []domain.Envelope, before uint64) {
	t.Helper()
	ctx := ctxT(t)
	first, prev, err := s.Start(ctx)
	if err != nil || first != before || prev != all[before-1].Hash {
		t.Fatalf("%s: Start = %d, %v, %v; want %d, %v", what, first, prev, err, before, all[before-1].Hash)
	}
	for _, from := range []uint64{0, before - 1} {
		_, err := s.ReadAll(ctx, from, 10)
		var te *eventstore.TrimmedError
		if !errors.As(err, &te) || !errors.Is(err, eventstore.ErrTrimmed) || te.From != from || te.First != before {
			t.Fatalf("%s: ReadAll(%d) = %v, want a TrimmedError from %d, first %d", what, from, err, from, before)
		}
		err = s.Subscribe(ctx, from, eventstore.Filter{}, func([]domain.Envelope) error { return errors.New("delivered") })
		if !errors.As(err, &te) || te.First != before {
			t.Fatalf("%s: Subscribe(%d) = %v, want a TrimmedError", what, from, err)
		}
	}
	var got []domain.Envelope
	for from := before; ; {
		page, err := s.ReadAll(ctx, from, 7)
		if err != nil {
			t.Fatalf("%s: ReadAll(%d): %v", what, from, err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
		from += uint64(len(page))
	}
	requireEvents(t, what+": the live log", all[before:], got[:min(len(got), len(all)-int(before))])

	// Streams: forgotten, kept with no live events, continuing.
	if _, err := s.ReadStream(ctx, "execution-3", 0, 100); !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Fatalf("%s: ReadStream of a trimmed stream = %v, want ErrStreamNotFound", what, err)
	}
	if evs, err := s.ReadStream(ctx, "execution-5", 0, 100); err != nil || len(evs) != 0 {
		t.Fatalf("%s: ReadStream of a kept stream without live events = %d events, %v", what, len(evs), err)
	}
	straddling := trimStream(int(before)) // events below the start and above
	var wantQ, wantS []domain.Envelope
	for _, e := range all[before:] {
		switch e.Stream {
		case "queue-q":
			wantQ = append(wantQ, e)
		case straddling:
			wantS = append(wantS, e)
		}
	}
	for name, want := range map[string][]domain.Envelope{"queue-q": wantQ, straddling: wantS} {
		for _, from := range []uint64{0, want[0].Version, want[0].Version + 1} {
			evs, err := s.ReadStream(ctx, name, from, 100)
			if err != nil {
				t.Fatalf("%s: ReadStream(%s, %d): %v", what, name, from, err)
			}
			skip := int(max(from, want[0].Version) - want[0].Version)
			requireEvents(t, fmt.Sprintf("%s: ReadStream(%s, %d)", what, name, from), want[skip:], evs)
		}
	}
}

// appendAfterTrim appends to the streams of a trimmed trimLog and checks
// their versions: kept streams go on, forgotten ones start again.
func appendAfterTrim(t *testing.T, what string, s *Store, all []domain.Envelope, before int) {
	t.Helper()
	lastQ := uint64(0)
	for _, e := range all {
		if e.Stream == "queue-q" {
			lastQ = e.Version
		}
	}
	for _, c := range []struct {
		stream   string
		expected eventstore.ExpectedVersion
		version  uint64
	}{
		{"execution-5", eventstore.Exact(8), 9},
		{trimStream(before), eventstore.Exact(8), 9},
		{"queue-q", eventstore.Exact(lastQ), lastQ + 1},
		{"execution-3", eventstore.NoStream, 0},
	} {
		res, err := s.Append(ctxT(t), c.stream, c.expected, ev("test.after", 0))
		if err != nil || res.Version != c.version {
			t.Fatalf("%s: append to %s = %+v, %v; want version %d", what, c.stream, res, err, c.version)
		}
	}
	// A trimmed event's id is forgotten: appending it again is a new event.
	res, err := s.Append(ctxT(t), "execution-new", eventstore.NoStream, all[3])
	if err != nil || res.Position < uint64(len(all)) {
		t.Fatalf("%s: re-appending a trimmed event = %+v, %v; want a new event", what, res, err)
	}
}

// TestTrim trims a log of many segments: reads below the start fail with a
// TrimmedError, the live log reads as before, kept and straddling streams
// continue their versions, trimmed ones are forgotten, the segment files
// below the start are deleted (the directory's bytes shrink), and all of it
// holds after a reopen, with or without the sealed file.
func TestTrim(t *testing.T) {
	t.Parallel()
	for _, hot := range []int{7, -1} {
		t.Run(fmt.Sprintf("hot=%d", hot), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			opts := Options{SegmentBytes: MinSegmentBytes, HotEvents: hot, NoSync: true, Preallocate: -1}
			s := openT(t, dir, opts)
			all := appendTrimLog(t, s, trimEvents(300))
			if n := len(s.f.list()); n < 20 {
				t.Fatalf("%d segments, want many", n)
			}
			bytesBefore, _ := dirBytes(t, dir)
			const before = 205
			if err := s.Trim(ctxT(t), before, []string{"queue-q", "execution-5"}); err != nil {
				t.Fatalf("Trim: %v", err)
			}
			checkTrimmed(t, "after Trim", s, all, before)
			bytesAfter, names := dirBytes(t, dir)
			if bytesAfter > bytesBefore/2 {
				t.Fatalf("the directory holds %d bytes after the trim, %d before: want less than half", bytesAfter, bytesBefore)
			}
			for _, name := range names {
				if p, ok := parseSegName(name); ok && p > 0 && p+20 < before || name == logName {
					t.Fatalf("segment %s is still there after a trim to %d (%v)", name, before, names)
				}
			}
			// Idempotent; before past the head is refused.
			if err := s.Trim(ctxT(t), before-10, nil); err != nil {
				t.Fatalf("Trim below the start: %v", err)
			}
			if err := s.Trim(ctxT(t), 10_000, nil); err == nil {
				t.Fatal("Trim past the head succeeded")
			}
			checkTrimmed(t, "after more Trims", s, all, before)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}

			s = openT(t, dir, opts)
			checkTrimmed(t, "after reopen", s, all, before)
			if s.loadedSealed == 0 {
				t.Fatal("the sealed file was not used after the trim")
			}
			crash(s)
			if err := removeLevels(t, dir); err != nil {
				t.Fatal(err)
			}
			s = openT(t, dir, opts)
			checkTrimmed(t, "after reopen without the sealed file", s, all, before)
			appendAfterTrim(t, "after reopen", s, all, before)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openT(t, dir, opts)
			if evs, err := s.ReadStream(ctxT(t), "execution-5", 0, 10); err != nil || len(evs) != 1 || evs[0].Version != 9 {
				t.Fatalf("ReadStream of a kept stream after an append = %+v, %v", evs, err)
			}
		})
	}
}

// TestTrimTwice trims, appends, and trims again: the kept streams' versions
// below the start add up across trims, and a reopen agrees.
func TestTrimTwice(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := Options{SegmentBytes: MinSegmentBytes, HotEvents: 5, NoSync: true}
	s := openT(t, dir, opts)
	appendTrimLog(t, s, trimEvents(100))
	if err := s.Trim(ctxT(t), 50, []string{"queue-q"}); err != nil {
		t.Fatal(err)
	}
	more := trimEvents(100)
	for i := range more {
		mustAppend(t, s, trimStream(100+i), eventstore.Any, more[i])
	}
	if err := s.Trim(ctxT(t), 150, []string{"queue-q", "execution-5"}); err != nil {
		t.Fatal(err)
	}
	// queue-q: versions 0..4 went at the first trim, 5..14 at the second.
	for round := range 2 {
		if evs, err := s.ReadStream(ctxT(t), "queue-q", 0, 100); err != nil || len(evs) < 5 || evs[0].Version != 15 || evs[0].Position != 159 {
			t.Fatalf("round %d: queue-q after two trims = %d events from %+v, %v", round, len(evs), evs, err)
		}
		res, err := s.Append(ctxT(t), "queue-q", eventstore.Exact(uint64(19+round)), ev("test.q", 0))
		if err != nil || res.Version != uint64(20+round) {
			t.Fatalf("round %d: append to queue-q = %+v, %v", round, res, err)
		}
		if _, err := s.ReadStream(ctxT(t), "execution-3", 0, 100); !errors.Is(err, eventstore.ErrStreamNotFound) {
			t.Fatalf("round %d: execution-3 (trimmed, not kept) = %v, want forgotten", round, err)
		}
		if evs, err := s.ReadStream(ctxT(t), "execution-5", 0, 100); err != nil || len(evs) != 0 {
			t.Fatalf("round %d: execution-5 (trimmed at the second trim, kept) = %+v, %v", round, evs, err)
		}
		if _, err := s.ReadAll(ctxT(t), 149, 1); !errors.Is(err, eventstore.ErrTrimmed) {
			t.Fatalf("round %d: ReadAll(149) = %v", round, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = openT(t, dir, opts)
	}
	res, err := s.Append(ctxT(t), "execution-5", eventstore.Exact(8), ev("test.5", 0))
	if err != nil || res.Version != 9 {
		t.Fatalf("append to execution-5 = %+v, %v", res, err)
	}
}

// TestTrimWhileAppending trims while writers append, and while one of them
// appends to a stream the trim forgets (its events all below the start, not
// kept): that stream's versions go on, and a reopen agrees.
func TestTrimWhileAppending(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := Options{SegmentBytes: MinSegmentBytes, HotEvents: 16, NoSync: true}
	s := openT(t, dir, opts)
	appendTrimLog(t, s, trimEvents(300))
	ctx, cancel := context.WithCancel(ctxT(t))
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				if _, err := s.Append(ctx, fmt.Sprintf("worker-%d", w), eventstore.Any, ev("test.w", i)); err != nil && ctx.Err() == nil {
					t.Errorf("append: %v", err)
					return
				}
			}
		})
	}
	// The hook runs between the trim's look at the streams and its install.
	s.trimHook = func() {
		if _, err := s.Append(context.Background(), "execution-2", eventstore.Exact(8), ev("test.late", 0)); err != nil {
			t.Errorf("late append: %v", err)
		}
	}
	if err := s.Trim(ctxT(t), 250, []string{"queue-q"}); err != nil {
		t.Fatalf("Trim: %v", err)
	}
	cancel()
	wg.Wait()
	check := func(what string) {
		evs, err := s.ReadStream(ctxT(t), "execution-2", 0, 10)
		if err != nil || len(evs) != 1 || evs[0].Version != 9 {
			t.Fatalf("%s: execution-2 = %+v, %v; want its late event, version 9", what, evs, err)
		}
		res, err := s.Append(ctxT(t), "execution-2", eventstore.Any, ev("test.later", 0))
		if err != nil || res.Version != evs[len(evs)-1].Version+1 {
			t.Fatalf("%s: append to execution-2 = %+v, %v", what, res, err)
		}
	}
	check("after the trim")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, opts)
	first, _, _ := s.Start(ctxT(t))
	if first != 250 {
		t.Fatalf("Start after reopen = %d", first)
	}
	h, _ := s.Head(ctxT(t))
	if got, err := s.ReadAll(ctxT(t), 250, int(h)); err != nil || len(got) != int(h-250) {
		t.Fatalf("ReadAll after reopen = %d events, %v", len(got), err)
	}
}

// TestTrimPowerLoss cuts the power at every file operation of a trim, in
// turn (the simulated disk of the power-loss tests, the unsynced tail torn
// at random), and reopens what the cut left: the live log starts where it
// started or at the new start, every event from there on is intact, the
// streams' versions go on, and a repeated Trim finishes the job and leaves
// no segment below the start.
func TestTrimPowerLoss(t *testing.T) {
	t.Parallel()
	const before = 65
	keep := []string{"queue-q", "execution-5"}
	evs := trimEvents(120)
	opts := Options{SegmentBytes: MinSegmentBytes, HotEvents: -1, Preallocate: -1, GroupCommitWait: -1}
	rng := rand.New(rand.NewPCG(1, 2))
	cuts := 0
	for k := 1; ; k++ {
		disk := diskfs.NewSim()
		s, err := OpenFS(disk, "/data", opts)
		if err != nil {
			t.Fatal(err)
		}
		all := appendTrimLog(t, s, evs)
		disk.PlanCut(k, rng)
		err = s.Trim(ctxT(t), before, keep)
		if !disk.WasCut() {
			if err != nil {
				t.Fatalf("Trim: %v", err)
			}
			_ = s.Close()
			if cuts < 8 {
				t.Fatalf("only %d file operations in a trim", cuts)
			}
			t.Logf("cut a trim at each of its %d file operations", cuts)
			return
		}
		cuts++
		img := disk.CutNow()
		_ = s.Close()
		what := fmt.Sprintf("cut at operation %d", k)
		for round := range 2 {
			disk = diskfs.FromImage(img)
			s, err = OpenFS(disk, "/data", opts)
			if err != nil {
				t.Fatalf("%s: Open: %v", what, err)
			}
			first, _, err := s.Start(ctxT(t))
			if err != nil || first != 0 && first != before || round == 1 && first != before {
				t.Fatalf("%s, round %d: Start = %d, %v", what, round, first, err)
			}
			var got []domain.Envelope
			if got, err = s.ReadAll(ctxT(t), first, 1000); err != nil {
				t.Fatalf("%s: ReadAll: %v", what, err)
			}
			requireEvents(t, what, all[first:], got)
			if first == before {
				checkTrimmed(t, what, s, all, before)
			}
			// A repeated trim finishes the deletion.
			if err := s.Trim(ctxT(t), before, keep); err != nil {
				t.Fatalf("%s: repeated Trim: %v", what, err)
			}
			names, _ := disk.ReadDir("/data")
			for _, name := range names {
				if p, ok := parseSegName(name); ok && (name == logName || p+20 < before) {
					t.Fatalf("%s: segment %s left after a repeated trim (%v)", what, name, names)
				}
				if strings.HasSuffix(name, tmpSuffix) && round == 1 {
					t.Fatalf("%s: %s left after a clean close", what, name)
				}
			}
			checkTrimmed(t, what+" after the repeated trim", s, all, before)
			if round == 1 {
				appendAfterTrim(t, what, s, all, before)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("%s: Close: %v", what, err)
			}
			img = disk.CutNow()
		}
	}
}
