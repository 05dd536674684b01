package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// testTimeout bounds every subtest so a hung backend fails instead of hanging CI.
const testTimeout = 60 * time.Second

// waitGroup waits for wg as wg.Wait does, but for limit at most: it reports
// false if the goroutines were still running then. Every wait of the suite
// has a deadline: a backend that ignores its context must fail the suite
// (with what it saw), not hang it.
func waitGroup(wg *sync.WaitGroup, limit time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(limit):
		return false
	}
}

// readBatch is the page size the suite uses when it reads a whole stream or log.
const readBatch = 1000

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func mustAppend(t *testing.T, ctx context.Context, st eventstore.Store, stream string, expected eventstore.ExpectedVersion, evs ...domain.Envelope) eventstore.AppendResult {
	t.Helper()
	res, err := st.Append(ctx, stream, expected, evs...)
	if err != nil {
		t.Fatalf("Append(%q, %s, %d events): %v", stream, expected, len(evs), err)
	}
	return res
}

// readStreamAll reads a whole stream page by page.
func readStreamAll(t *testing.T, ctx context.Context, st eventstore.Store, stream string) []domain.Envelope {
	t.Helper()
	var out []domain.Envelope
	for {
		page, err := st.ReadStream(ctx, stream, uint64(len(out)), readBatch)
		if err != nil {
			t.Fatalf("ReadStream(%q, %d, %d): %v", stream, len(out), readBatch, err)
		}
		out = append(out, page...)
		if len(page) < readBatch {
			return out
		}
	}
}

// readAll reads the whole log page by page.
func readAll(t *testing.T, ctx context.Context, st eventstore.Store) []domain.Envelope {
	t.Helper()
	return readFrom(t, ctx, st, 0)
}

func mustHead(t *testing.T, ctx context.Context, st eventstore.Store) uint64 {
	t.Helper()
	h, err := st.Head(ctx)
	if err != nil {
		t.Fatalf("Head: %v", err)
	}
	return h
}

// logState is what the suite compares to prove that a failed call changed nothing.
type logState struct {
	head   uint64
	events []domain.Envelope
}

func snapshot(t *testing.T, ctx context.Context, st eventstore.Store) logState {
	t.Helper()
	return logState{head: mustHead(t, ctx, st), events: readAll(t, ctx, st)}
}

// requireUnchanged fails unless the log holds exactly the events of before. With
// dense positions Head must not have moved either; otherwise it must not have
// gone back (a sparse backend may burn positions on a failed write).
func (s suite) requireUnchanged(t *testing.T, ctx context.Context, st eventstore.Store, before logState, what string) {
	t.Helper()
	after := snapshot(t, ctx, st)
	if s.caps.DensePositions && after.head != before.head {
		t.Errorf("%s changed Head from %d to %d", what, before.head, after.head)
	}
	if after.head < before.head {
		t.Errorf("%s moved Head back from %d to %d", what, before.head, after.head)
	}
	if len(after.events) != len(before.events) {
		t.Fatalf("%s changed the log from %d to %d events", what, len(before.events), len(after.events))
	}
	for i := range after.events {
		if err := sameStored(&before.events[i], &after.events[i]); err != nil {
			t.Fatalf("%s changed event %d of the log: %v", what, i, err)
		}
	}
}

// requireStreamMissing fails unless ReadStream reports ErrStreamNotFound.
func requireStreamMissing(t *testing.T, ctx context.Context, st eventstore.Store, stream string) {
	t.Helper()
	evs, err := st.ReadStream(ctx, stream, 0, 10)
	if !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Fatalf("ReadStream(%q) of a stream never written: got %d events and error %v, want ErrStreamNotFound", stream, len(evs), err)
	}
}

// requireWrongVersion checks that err is the typed wrong-version error with the
// given details.
func requireWrongVersion(t *testing.T, err error, stream string, expected eventstore.ExpectedVersion, exists bool, actual uint64) {
	t.Helper()
	if err == nil {
		t.Fatalf("append to %q with expected %s succeeded, want ErrWrongExpectedVersion", stream, expected)
	}
	if !errors.Is(err, eventstore.ErrWrongExpectedVersion) {
		t.Fatalf("append to %q with expected %s: got %v, want errors.Is ErrWrongExpectedVersion", stream, expected, err)
	}
	var wv *eventstore.WrongVersionError
	if !errors.As(err, &wv) {
		t.Fatalf("append to %q with expected %s: %v is not a *eventstore.WrongVersionError", stream, expected, err)
	}
	if wv.Stream != stream {
		t.Errorf("WrongVersionError.Stream = %q, want %q", wv.Stream, stream)
	}
	if wv.Expected != expected {
		t.Errorf("WrongVersionError.Expected = %s, want %s", wv.Expected, expected)
	}
	if wv.Exists != exists {
		t.Errorf("WrongVersionError.Exists = %v, want %v", wv.Exists, exists)
	}
	if exists && wv.Actual != actual {
		t.Errorf("WrongVersionError.Actual = %d, want %d", wv.Actual, actual)
	}
}

// sameWritten reports how got differs from want in the fields a writer fills.
// JSON is compared byte for byte: a backend must not re-encode it.
func sameWritten(want, got *domain.Envelope) error {
	switch {
	case got.ID != want.ID:
		return fmt.Errorf("ID = %s, want %s", got.ID, want.ID)
	case got.Type != want.Type:
		return fmt.Errorf("event %s: Type = %q, want %q", want.ID, got.Type, want.Type)
	case got.SchemaVersion != want.SchemaVersion:
		return fmt.Errorf("event %s: SchemaVersion = %d, want %d", want.ID, got.SchemaVersion, want.SchemaVersion)
	case got.Owner != want.Owner:
		return fmt.Errorf("event %s: Owner = %q, want %q", want.ID, got.Owner, want.Owner)
	case got.CorrelationID != want.CorrelationID:
		return fmt.Errorf("event %s: CorrelationID = %q, want %q", want.ID, got.CorrelationID, want.CorrelationID)
	case got.CausationID != want.CausationID:
		return fmt.Errorf("event %s: CausationID = %q, want %q", want.ID, got.CausationID, want.CausationID)
	case got.Writer != want.Writer:
		return fmt.Errorf("event %s: Writer = %q, want %q", want.ID, got.Writer, want.Writer)
	case !bytes.Equal(got.Data, want.Data):
		return fmt.Errorf("event %s: Data = %q, want %q (bytes must round-trip exactly)", want.ID, got.Data, want.Data)
	case !bytes.Equal(got.Metadata, want.Metadata):
		return fmt.Errorf("event %s: Metadata = %q, want %q (bytes must round-trip exactly)", want.ID, got.Metadata, want.Metadata)
	}
	return nil
}

// sameStored reports how two reads of the same stored event differ, in any field.
func sameStored(want, got *domain.Envelope) error {
	if err := sameWritten(want, got); err != nil {
		return err
	}
	switch {
	case got.Stream != want.Stream:
		return fmt.Errorf("event %s: Stream = %q, want %q", want.ID, got.Stream, want.Stream)
	case got.Version != want.Version:
		return fmt.Errorf("event %s: Version = %d, want %d", want.ID, got.Version, want.Version)
	case got.Position != want.Position:
		return fmt.Errorf("event %s: Position = %d, want %d", want.ID, got.Position, want.Position)
	case !got.Time.Equal(want.Time):
		return fmt.Errorf("event %s: Time = %v, want %v", want.ID, got.Time, want.Time)
	case got.Hash != want.Hash:
		return fmt.Errorf("event %s: Hash = %s, want %s", want.ID, got.Hash, want.Hash)
	}
	return nil
}

// requireSameEvents fails unless got and want are the same stored events in the
// same order.
func requireSameEvents(t *testing.T, what string, want, got []domain.Envelope) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d events, want %d", what, len(got), len(want))
	}
	for i := range want {
		if err := sameStored(&want[i], &got[i]); err != nil {
			t.Fatalf("%s: event %d: %v", what, i, err)
		}
	}
}

// requireWritten fails unless got holds exactly the events of want, in order,
// as written (writer-filled fields only).
func requireWritten(t *testing.T, what string, want, got []domain.Envelope) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d events, want %d", what, len(got), len(want))
	}
	for i := range want {
		if err := sameWritten(&want[i], &got[i]); err != nil {
			t.Fatalf("%s: event %d: %v", what, i, err)
		}
	}
}

// requireStreamShape fails unless evs are one stream's events with versions
// first, first+1, … and strictly increasing positions.
func requireStreamShape(t *testing.T, what, stream string, first uint64, evs []domain.Envelope) {
	t.Helper()
	for i := range evs {
		e := &evs[i]
		if e.Stream != stream {
			t.Fatalf("%s: event %d has Stream %q, want %q", what, i, e.Stream, stream)
		}
		if want := first + uint64(i); e.Version != want {
			t.Fatalf("%s: event %d has Version %d, want %d (0-based, contiguous)", what, i, e.Version, want)
		}
		if i > 0 && e.Position <= evs[i-1].Position {
			t.Fatalf("%s: event %d has Position %d after %d (must strictly increase)", what, i, e.Position, evs[i-1].Position)
		}
	}
}

// requireLogShape fails unless positions strictly increase (and, with dense
// positions, are first, first+1, …) and every stream's versions are contiguous
// and increasing in log order.
func (s suite) requireLogShape(t *testing.T, what string, evs []domain.Envelope) {
	t.Helper()
	next := map[string]uint64{}
	for i := range evs {
		e := &evs[i]
		if i > 0 {
			if e.Position <= evs[i-1].Position {
				t.Fatalf("%s: event %d has Position %d after %d (must strictly increase)", what, i, e.Position, evs[i-1].Position)
			}
			if s.caps.DensePositions && e.Position != evs[i-1].Position+1 {
				t.Fatalf("%s: event %d has Position %d after %d (dense positions have no holes)", what, i, e.Position, evs[i-1].Position)
			}
		}
		if v, seen := next[e.Stream]; seen && e.Version != v {
			t.Fatalf("%s: event %d of stream %q has Version %d, want %d", what, i, e.Stream, e.Version, v)
		}
		next[e.Stream] = e.Version + 1
	}
}

// requireErrorIs fails unless err matches target.
func requireErrorIs(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want errors.Is %v", what, err, target)
	}
}

// appended is one append's event and what Append returned for it.
type appended struct {
	id  uuid.UUID
	res eventstore.AppendResult
}

// writeConcurrently runs writers goroutines; writer w appends each events, one
// per append with expected version Any, to stream(w), calling after(w, i), if
// not nil, after its i-th append. It checks that each writer's results have
// strictly increasing positions (its appends commit in the order it makes
// them) and returns every append's result.
func writeConcurrently(ctx context.Context, st eventstore.Store, writers, each int, stream func(w int) string, after func(w, i int)) ([]appended, error) {
	var wg sync.WaitGroup
	var returned atomic.Int64
	errs := make([]error, writers)
	results := make([][]appended, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				e := NewEvent("test.w", map[string]int{"w": w, "i": i})
				res, err := st.Append(ctx, stream(w), eventstore.Any, e)
				returned.Add(1)
				if err != nil {
					errs[w] = fmt.Errorf("writer %d, append %d: %w", w, i, err)
					return
				}
				if n := len(results[w]); n > 0 && res.Position <= results[w][n-1].res.Position {
					errs[w] = fmt.Errorf("writer %d, append %d: position %d, not after its previous append's %d", w, i, res.Position, results[w][n-1].res.Position)
					return
				}
				results[w] = append(results[w], appended{e.ID, res})
				if after != nil {
					after(w, i)
				}
			}
		})
	}
	if !waitGroup(&wg, testTimeout) {
		return nil, fmt.Errorf("%d writers still running after %v: %d of %d appends returned", writers, testTimeout, returned.Load(), writers*each)
	}
	var all []appended
	for _, r := range results {
		all = append(all, r...)
	}
	return all, errors.Join(errs...)
}

// requireResults fails unless every append's result names the position and
// version where its event is in log.
func requireResults(t *testing.T, log []domain.Envelope, results []appended) {
	t.Helper()
	byID := make(map[uuid.UUID]*domain.Envelope, len(log))
	for i := range log {
		byID[log[i].ID] = &log[i]
	}
	for _, r := range results {
		e, ok := byID[r.id]
		if !ok {
			t.Fatalf("event %s was appended (result %+v) but is not in the log", r.id, r.res)
		}
		if e.Position != r.res.Position || e.Version != r.res.Version {
			t.Fatalf("Append of event %s returned %+v, but it is at version %d position %d", r.id, r.res, e.Version, e.Position)
		}
	}
}

// requireEmpty fails unless st is an empty store, as newStore must give.
func requireEmpty(t *testing.T, st eventstore.Store) {
	t.Helper()
	ctx := testContext(t)
	evs, err := st.ReadAll(ctx, 0, 1)
	if err != nil {
		t.Fatalf("ReadAll on a new store: %v", err)
	}
	if len(evs) != 0 {
		t.Fatalf("newStore returned a store that is not empty (event at position %d); every subtest needs a fresh store", evs[0].Position)
	}
	if h := mustHead(t, ctx, st); h != 0 {
		t.Fatalf("Head of a new store = %d, want 0", h)
	}
}
