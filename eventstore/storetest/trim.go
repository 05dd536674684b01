package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// Trimming the live log (eventstore.Trimmer), for a store that implements it.

func (s suite) trimTests() []subtest {
	return []subtest{
		{name: "ReadsAndStreams", run: s.trimReadsAndStreams},
		{name: "Idempotent", run: s.trimIdempotent},
		{name: "Everything", run: s.trimEverything},
		{name: "ChainContinues", run: s.trimChain},
		{name: "SubscribeBelowStart", run: s.trimSubscribe},
	}
}

func needTrim(t *testing.T, st eventstore.Store) eventstore.Trimmer {
	t.Helper()
	tr, ok := st.(eventstore.Trimmer)
	if !ok {
		t.Skip("skipped: the backend does not implement eventstore.Trimmer")
	}
	return tr
}

// readFrom reads the log from position from to its head, page by page.
func readFrom(t *testing.T, ctx context.Context, st eventstore.Store, from uint64) []domain.Envelope {
	t.Helper()
	var out []domain.Envelope
	for {
		page, err := st.ReadAll(ctx, from, readBatch)
		if err != nil {
			t.Fatalf("ReadAll(%d, %d): %v", from, readBatch, err)
		}
		out = append(out, page...)
		if len(page) < readBatch {
			return out
		}
		from = page[len(page)-1].Position + 1
	}
}

func requireTrimmedError(t *testing.T, err error, what string, first uint64) {
	t.Helper()
	var te *eventstore.TrimmedError
	if !errors.Is(err, eventstore.ErrTrimmed) || !errors.As(err, &te) {
		t.Fatalf("%s: got %v, want a *eventstore.TrimmedError", what, err)
	}
	if te.First != first {
		t.Errorf("%s: TrimmedError.First = %d, want %d", what, te.First, first)
	}
}

// The example log of the trim checks: kept has events on both sides of the
// cut, gone only below it (and is not kept), idle only below it (and is
// kept), live only above it.
type trimExample struct {
	cut    uint64 // the position of the first event kept
	before []domain.Envelope
}

func writeTrimExample(t *testing.T, ctx context.Context, st eventstore.Store) trimExample {
	t.Helper()
	mustAppend(t, ctx, st, "trim-kept", eventstore.NoStream, NewEvents("test.k", 2)...)
	mustAppend(t, ctx, st, "trim-gone", eventstore.NoStream, NewEvents("test.g", 3)...)
	mustAppend(t, ctx, st, "trim-idle", eventstore.NoStream, NewEvents("test.i", 1)...)
	res := mustAppend(t, ctx, st, "trim-kept", eventstore.Exact(1), NewEvents("test.k", 2)...)
	mustAppend(t, ctx, st, "trim-live", eventstore.NoStream, NewEvents("test.l", 2)...)
	all := readAll(t, ctx, st)
	var cut uint64
	for _, e := range all {
		if e.Stream == "trim-kept" && e.Version == 2 {
			cut = e.Position
		}
	}
	if cut == 0 || res.Position <= cut {
		t.Fatalf("the example log has no third event of trim-kept before %d", res.Position)
	}
	return trimExample{cut: cut, before: all}
}

func (x trimExample) after() []domain.Envelope {
	for i, e := range x.before {
		if e.Position >= x.cut {
			return x.before[i:]
		}
	}
	return nil
}

func mustTrim(t *testing.T, ctx context.Context, tr eventstore.Trimmer, before uint64, keep ...string) {
	t.Helper()
	if err := tr.Trim(ctx, before, keep); err != nil {
		t.Fatalf("Trim(%d, %v): %v", before, keep, err)
	}
}

// After a trim: reads below the start fail with TrimmedError, the rest reads
// as before, Head is unchanged, kept streams continue and other trimmed
// streams are forgotten.
func (s suite) trimReadsAndStreams(t *testing.T, st eventstore.Store) {
	tr := needTrim(t, st)
	ctx := testContext(t)
	x := writeTrimExample(t, ctx, st)
	head := mustHead(t, ctx, st)
	mustTrim(t, ctx, tr, x.cut, "trim-kept", "trim-idle", "trim-live")

	first, _, err := tr.Start(ctx)
	if err != nil || first != x.cut {
		t.Fatalf("Start after Trim(%d) = %d, %v", x.cut, first, err)
	}
	if h := mustHead(t, ctx, st); h != head {
		t.Errorf("Trim moved Head from %d to %d", head, h)
	}
	_, err = st.ReadAll(ctx, 0, 10)
	requireTrimmedError(t, err, "ReadAll(0) after a trim", x.cut)
	requireSameEvents(t, "the live log after a trim", x.after(), readFrom(t, ctx, st, x.cut))

	// kept, with live events: ReadStream gives them from the first live version
	kept, err := st.ReadStream(ctx, "trim-kept", 0, 10)
	if err != nil {
		t.Fatalf("ReadStream(trim-kept, 0): %v", err)
	}
	if len(kept) != 2 || kept[0].Version != 2 {
		t.Fatalf("ReadStream(trim-kept, 0) after the trim: %d events from version %v, want its 2 live ones from version 2", len(kept), versions(kept))
	}
	mustAppend(t, ctx, st, "trim-kept", eventstore.Exact(3), NewEvent("test.k", nil))
	_, err = st.Append(ctx, "trim-kept", eventstore.NoStream, NewEvent("test.k", nil))
	requireWrongVersion(t, err, "trim-kept", eventstore.NoStream, true, 4)

	// kept, all trimmed: it exists at its version, with no live events
	idle, err := st.ReadStream(ctx, "trim-idle", 0, 10)
	if err != nil || len(idle) != 0 {
		t.Fatalf("ReadStream(trim-idle) of a kept stream wholly trimmed: %d events, %v; want none and no error", len(idle), err)
	}
	_, err = st.Append(ctx, "trim-idle", eventstore.NoStream, NewEvent("test.i", nil))
	requireWrongVersion(t, err, "trim-idle", eventstore.NoStream, true, 0)
	res := mustAppend(t, ctx, st, "trim-idle", eventstore.Exact(0), NewEvent("test.i", nil))
	if res.Version != 1 {
		t.Errorf("the kept stream trim-idle continued at version %d, want 1", res.Version)
	}

	// not kept, all trimmed: forgotten
	requireStreamMissing(t, ctx, st, "trim-gone")
	res = mustAppend(t, ctx, st, "trim-gone", eventstore.NoStream, NewEvent("test.g", nil))
	if res.Version != 0 {
		t.Errorf("the forgotten stream trim-gone was created again at version %d, want 0", res.Version)
	}
	// only above the cut: untouched
	mustAppend(t, ctx, st, "trim-live", eventstore.Exact(1), NewEvent("test.l", nil))
}

func versions(evs []domain.Envelope) []uint64 {
	out := make([]uint64, len(evs))
	for i := range evs {
		out[i] = evs[i].Version
	}
	return out
}

// Trim at or below the start changes nothing; past the head it is refused.
func (s suite) trimIdempotent(t *testing.T, st eventstore.Store) {
	tr := needTrim(t, st)
	ctx := testContext(t)
	first, prev, err := tr.Start(ctx)
	if err != nil || first != 0 || !prev.IsZero() {
		t.Fatalf("Start of a new store = %d, %s, %v; want 0, the zero hash", first, prev, err)
	}
	x := writeTrimExample(t, ctx, st)
	mustTrim(t, ctx, tr, x.cut, "trim-kept")
	mustTrim(t, ctx, tr, x.cut, "trim-kept")
	mustTrim(t, ctx, tr, x.cut-1)
	mustTrim(t, ctx, tr, 0)
	if f, _, _ := tr.Start(ctx); f != x.cut {
		t.Fatalf("Start after repeated and lower trims = %d, want %d", f, x.cut)
	}
	requireSameEvents(t, "the live log after repeated trims", x.after(), readFrom(t, ctx, st, x.cut))
	head := mustHead(t, ctx, st)
	if err := tr.Trim(ctx, head+1, nil); err == nil {
		t.Fatalf("Trim(%d) past the head %d succeeded", head+1, head)
	}
	if f, _, _ := tr.Start(ctx); f != x.cut {
		t.Fatalf("a refused trim moved the start to %d", f)
	}
}

// Trimming the whole log leaves an empty live log at the head that takes
// appends as before.
func (s suite) trimEverything(t *testing.T, st eventstore.Store) {
	tr := needTrim(t, st)
	ctx := testContext(t)
	writeTrimExample(t, ctx, st)
	head := mustHead(t, ctx, st)
	mustTrim(t, ctx, tr, head, "trim-kept")
	if evs := readFrom(t, ctx, st, head); len(evs) != 0 {
		t.Fatalf("ReadAll(head) after trimming everything: %d events", len(evs))
	}
	res := mustAppend(t, ctx, st, "trim-kept", eventstore.Exact(3), NewEvent("test.k", nil))
	if res.Position < head || res.Version != 4 {
		t.Fatalf("the append after trimming everything landed at position %d, version %d", res.Position, res.Version)
	}
	if evs := readFrom(t, ctx, st, head); len(evs) != 1 {
		t.Fatalf("the live log holds %d events after one append, want 1", len(evs))
	}
}

// Start names the hash of the last trimmed event, and new events chain on.
func (s suite) trimChain(t *testing.T, st eventstore.Store) {
	tr := needTrim(t, st)
	needChain(t, st)
	ctx := testContext(t)
	x := writeTrimExample(t, ctx, st)
	var last domain.Hash
	for _, e := range x.before {
		if e.Position < x.cut {
			last = e.Hash
		}
	}
	mustTrim(t, ctx, tr, x.cut, "trim-kept")
	first, prev, err := tr.Start(ctx)
	if err != nil || first != x.cut || prev != last {
		t.Fatalf("Start = %d, %s, %v; want %d and the last trimmed event's hash %s", first, prev, err, x.cut, last)
	}
	mustAppend(t, ctx, st, "trim-new", eventstore.NoStream, NewEvents("test.n", 3)...)
	requireChained(t, "the live log after a trim and more appends", prev, readFrom(t, ctx, st, first))
}

// A subscription from below the start fails with TrimmedError; from the start
// it delivers the live log.
func (s suite) trimSubscribe(t *testing.T, st eventstore.Store) {
	tr := needTrim(t, st)
	ctx := testContext(t)
	x := writeTrimExample(t, ctx, st)
	mustTrim(t, ctx, tr, x.cut, "trim-kept")
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := st.Subscribe(sctx, 0, eventstore.Filter{}, func([]domain.Envelope) error { return fmt.Errorf("delivered a trimmed event") })
	requireTrimmedError(t, err, "Subscribe(0) after a trim", x.cut)
	want := x.after()
	var got []domain.Envelope
	done := errors.New("done")
	err = st.Subscribe(sctx, x.cut, eventstore.Filter{}, func(b []domain.Envelope) error {
		got = append(got, b...)
		if len(got) >= len(want) {
			return done
		}
		return nil
	})
	if err != done {
		t.Fatalf("Subscribe(%d): %v after %d events", x.cut, err, len(got))
	}
	requireSameEvents(t, "Subscribe from the start", want, got)
}
