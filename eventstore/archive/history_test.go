package archive_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/archive"
	"github.com/turnstile/turnstile/eventstore/archive/archivetest"
	"github.com/turnstile/turnstile/eventstore/memstore"
)

// trimming is a memstore that a test can trim: reads below its start fail
// with ErrTrimmed, as eventstore.Trimmer promises.
type trimming struct {
	*memstore.Store
	mu    sync.Mutex
	start uint64
}

func (s *trimming) Trim(ctx context.Context, before uint64, keep []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.start = max(s.start, before)
	return nil
}

func (s *trimming) Start(ctx context.Context) (uint64, domain.Hash, error) {
	s.mu.Lock()
	start := s.start
	s.mu.Unlock()
	var prev domain.Hash
	if start == 0 {
		return 0, prev, nil
	}
	evs, err := s.Store.ReadAll(ctx, 0, int(start))
	for i := range evs {
		prev = eventstore.NextHash(prev, &evs[i])
	}
	return start, prev, err
}

func (s *trimming) first() uint64 { s.mu.Lock(); defer s.mu.Unlock(); return s.start }

func (s *trimming) ReadAll(ctx context.Context, from uint64, limit int) ([]domain.Envelope, error) {
	if first := s.first(); from < first {
		return nil, &eventstore.TrimmedError{From: from, First: first}
	}
	return s.Store.ReadAll(ctx, from, limit)
}

func (s *trimming) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]domain.Envelope, error) {
	evs, err := s.Store.ReadStream(ctx, stream, from, 1<<30)
	first := s.first()
	for len(evs) > 0 && evs[0].Position < first {
		evs = evs[1:]
	}
	if err == nil && len(evs) == 0 {
		return nil, eventstore.ErrStreamNotFound
	}
	return evs[:min(len(evs), limit)], err
}

func (s *trimming) Subscribe(ctx context.Context, from uint64, f eventstore.Filter, handle func([]domain.Envelope) error) error {
	if first := s.first(); from < first {
		return &eventstore.TrimmedError{From: from, First: first}
	}
	return s.Store.Subscribe(ctx, from, f, func(evs []domain.Envelope) error {
		if first := s.first(); evs[0].Position < first {
			return &eventstore.TrimmedError{From: evs[0].Position, First: first}
		}
		return handle(evs)
	})
}

func TestHistoryReadsArchiveThenLiveOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	live := &trimming{Store: fill(t, 1000, 7)}
	want := archivetest.ReadAll(t, live, 0)
	a := archivetest.Open(t, t.TempDir())
	a.SetSegmentEvents(250)
	h := archive.History{Archive: a, Live: live}

	check := func(what string) {
		t.Helper()
		got := archivetest.ReadAll(t, h, 0)
		if len(got) != len(want) {
			t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
		}
		for i := range want {
			same(t, got[i], want[i])
		}
		for _, stream := range []string{"s-0", "s-6"} {
			ws, _ := live.Store.ReadStream(ctx, stream, 0, 10_000)
			gs, err := h.ReadStream(ctx, stream, 0, 10_000)
			if err != nil || len(gs) != len(ws) {
				t.Fatalf("%s: ReadStream(%s): %d events, %v; want %d", what, stream, len(gs), err, len(ws))
			}
			for i := range ws {
				same(t, gs[i], ws[i])
			}
			page, err := h.ReadStream(ctx, stream, 30, 50)
			if err != nil || len(page) != 50 || page[0].Version != 30 || page[49].Version != 79 {
				t.Fatalf("%s: ReadStream(%s, 30, 50): %d events, %v", what, stream, len(page), err)
			}
		}
		if _, err := h.Continues(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	check("no archive")
	if err := a.Write(ctx, live, 0, 600); err != nil {
		t.Fatal(err)
	}
	check("archived, not trimmed yet (a crash between the two)")
	live.Trim(ctx, 600, nil)
	check("archived and trimmed")
	live.Trim(ctx, 800, nil)
	if _, err := h.ReadAll(ctx, 600, 10); !errors.Is(err, eventstore.ErrTrimmed) {
		t.Fatalf("a gap between the archive and the live log read as %v, want ErrTrimmed", err)
	}
	var m *archive.Mismatch
	if _, err := h.Continues(ctx); !errors.As(err, &m) || m.Position != 600 {
		t.Fatalf("Continues with a gap: %v, want a mismatch at 600", err)
	}
	if err := a.Write(ctx, live, 600, 800); err == nil {
		t.Fatal("archived trimmed positions")
	}
}

func TestHistorySubscribeCrossesATrim(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	live := &trimming{Store: fill(t, 3000, 5)}
	a := archivetest.Write(t, live, t.TempDir(), 500, 0, 1000)
	live.Trim(ctx, 1000, nil)
	h := archive.History{Archive: a, Live: live}

	got := make(chan domain.Envelope, 10_000)
	done := make(chan error, 1)
	sub, stop := context.WithCancel(ctx)
	defer stop()
	gate, atLive := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		done <- h.Subscribe(sub, 0, eventstore.Filter{StreamPrefixes: []string{"s-1", "s-3", "late"}}, func(evs []domain.Envelope) error {
			if evs[0].Position >= 1000 {
				once.Do(func() { close(atLive); <-gate }) // hold the first live batch until the trim
			}
			for _, e := range evs {
				got <- e
			}
			return nil
		})
	}()
	// While it reads the live log, the archiver moves more to the archive
	// and trims, and a writer appends.
	<-atLive
	archivetest.Move(t, a, live, 2500, nil)
	close(gate)
	for i := 0; i < 10; i++ {
		if _, err := live.Append(ctx, "late", eventstore.Any, domain.Envelope{ID: uuid.New(), Type: "t", Owner: domain.OwnerAPI, Data: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	next := uint64(0)
	for n := 0; n < 1200+10; n++ {
		select {
		case e := <-got:
			if e.Position < next {
				t.Fatalf("position %d after %d", e.Position, next)
			}
			for ; next < e.Position; next++ {
				if s := (next % 5); next < 3000 && (s == 1 || s == 3) {
					t.Fatalf("position %d (stream s-%d) skipped", next, s)
				}
			}
			next = e.Position + 1
		case err := <-done:
			t.Fatalf("subscription ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("got %d events up to position %d", n, next)
		}
	}
	if next != 3010 {
		t.Fatalf("last position %d, want 3009", next-1)
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("subscription ended with %v", err)
	}
}

// The memstore's own trim: kept streams continue, others are forgotten;
// History still reads every stream whole and the live log continues the
// archive's chain.
func TestHistoryOverTheMemstoresTrim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	live := memstore.New(memstore.Options{})
	put := func(stream string) {
		if _, err := live.Append(ctx, stream, eventstore.Any, domain.Envelope{ID: uuid.New(), Type: "t", Owner: domain.OwnerAPI, Data: []byte(`{"x": "<&>"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 300; i++ {
		put("old") // only archived once trimmed
		put("kept")
		if i%2 == 0 {
			put("both")
		}
	}
	for i := 0; i < 50; i++ {
		put("both")
		put("new")
	}
	if !eventstore.KeepsChain(live) {
		t.Fatal("the memstore keeps no chain")
	}
	want := archivetest.ReadAll(t, live, 0)
	streams := map[string][]domain.Envelope{}
	for _, s := range []string{"old", "kept", "both", "new"} {
		streams[s], _ = live.ReadStream(ctx, s, 0, 10_000)
	}
	a := archivetest.Open(t, t.TempDir())
	a.SetSegmentEvents(200)
	archivetest.Move(t, a, live, 750, []string{"kept"})
	if _, err := live.ReadStream(ctx, "old", 0, 10); !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Fatalf("the live log still knows stream old: %v", err)
	}
	h := archive.History{Archive: a, Live: live}
	if start, err := h.Continues(ctx); err != nil || start != 750 {
		t.Fatalf("Continues: %d, %v", start, err)
	}
	got := archivetest.ReadAll(t, h, 0)
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d", len(got), len(want))
	}
	for i := range want {
		same(t, got[i], want[i])
	}
	for s, ws := range streams {
		gs, err := h.ReadStream(ctx, s, 0, 10_000)
		if err != nil || len(gs) != len(ws) {
			t.Fatalf("ReadStream(%s): %d events, %v; want %d", s, len(gs), err, len(ws))
		}
		for i := range ws {
			same(t, gs[i], ws[i])
		}
	}
	if _, err := h.ReadStream(ctx, "none", 0, 10); !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Fatalf("ReadStream of no stream: %v", err)
	}
	// A second archive that starts at the live log's start chains after
	// the hash the live log gives for it.
	b := archivetest.Write(t, live, t.TempDir(), 0, 750, 800)
	if b.Segments()[0].PrevHash != a.EndHash() {
		t.Fatalf("an archive starting at 750 chains after %s, want %s", b.Segments()[0].PrevHash, a.EndHash())
	}
	if _, err := b.Verify(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Append(ctx, "x", eventstore.Any); !errors.Is(err, archive.ErrReadOnly) {
		t.Fatalf("Append on History: %v", err)
	}
}

// An archive of another log does not join this one.
func TestContinuesRefusesAnotherLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mine, other := fill(t, 300, 3), fill(t, 300, 3)
	a := archivetest.Write(t, other, t.TempDir(), 0, 0, 200)
	var m *archive.Mismatch
	if _, err := (archive.History{Archive: a, Live: mine}).Continues(ctx); !errors.As(err, &m) || m.Position != 199 {
		t.Fatalf("an archive of another log, untrimmed: %v, want a mismatch at 199", err)
	}
	if err := mine.Trim(ctx, 200, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := (archive.History{Archive: a, Live: mine}).Continues(ctx); !errors.As(err, &m) || m.Position != 200 {
		t.Fatalf("an archive of another log, trimmed: %v, want a mismatch at 200", err)
	}
	if _, err := (archive.History{Archive: a, Live: other}).Continues(ctx); err != nil {
		t.Fatalf("its own log: %v", err)
	}
}
