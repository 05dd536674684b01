package kurrentdb

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/internal/waitfor"
)

// What a real server does with a retried append that the fake, read
// naively, would hide: it compares event ids only, and for Any and
// StreamExists only through a bounded cache that a restart empties.

// TestSameIDsOtherContentAfterLaterAppends: once a batch has left the tail
// the store reads before appending, the server recognises a retry by its ids
// alone; the same ids with other content must still be a conflict, for
// every event of the batch, not only the last.
func TestSameIDsOtherContentAfterLaterAppends(t *testing.T) {
	t.Parallel()
	for _, expected := range []eventstore.ExpectedVersion{eventstore.NoStream, eventstore.Any, eventstore.StreamExists} {
		for _, changed := range []int{0, 1, 2} {
			t.Run(expected.String()+"/event"+string(rune('0'+changed)), func(t *testing.T) {
				t.Parallel()
				_, s := openFake(t, Options{})
				const stream = "execution-c"
				batch := storetest.NewEvents("test.b", 3)
				first := mustAppend(t, s, stream, eventstore.NoStream, batch...)
				mustAppend(t, s, stream, eventstore.Exact(2), storetest.NewEvents("test.later", 4)...)
				count := len(mustReadAll(t, s))

				res, err := s.Append(t.Context(), stream, expected, batch...)
				if err != nil || res != first {
					t.Fatalf("the same batch again with %s: %+v, %v; want %+v", expected, res, err, first)
				}
				other := append([]domain.Envelope(nil), batch...)
				other[changed].Data = json.RawMessage(`{"other":true}`)
				if _, err := s.Append(t.Context(), stream, expected, other...); !errors.Is(err, eventstore.ErrIdempotencyConflict) {
					t.Fatalf("the same ids with event %d changed, %s: %v; want ErrIdempotencyConflict", changed, expected, err)
				}
				if n := len(mustReadAll(t, s)); n != count {
					t.Fatalf("the retries wrote %d events", n-count)
				}
			})
		}
	}
}

// TestAnyIdsOutOfPlace: with Any the server acknowledges a batch whose ids are
// all in its cache for the stream, wherever they are; the store holds it to
// the contract (the same batch, in order, at consecutive versions).
func TestAnyIdsOutOfPlace(t *testing.T) {
	t.Parallel()
	_, s := openFake(t, Options{})
	const stream = "execution-o"
	a := storetest.NewEvents("test.a", 2)
	mustAppend(t, s, stream, eventstore.NoStream, a[0])
	mustAppend(t, s, stream, eventstore.Exact(0), storetest.NewEvent("test.between", nil))
	mustAppend(t, s, stream, eventstore.Exact(1), a[1])
	mustAppend(t, s, stream, eventstore.Exact(2), storetest.NewEvents("test.later", 3)...)
	if _, err := s.Append(t.Context(), stream, eventstore.Any, a...); !errors.Is(err, eventstore.ErrIdempotencyConflict) {
		t.Fatalf("ids stored apart, appended together with Any: %v; want ErrIdempotencyConflict", err)
	}
}

// TestAnyRetryAcrossRestart: the server's cache of recent ids is in memory. A
// retry with Any after a restart is recognised by the store while the batch
// is in the stream's tail; once later appends have pushed it out, the server
// writes it again, and so does the store (the gap the README names).
func TestAnyRetryAcrossRestart(t *testing.T) {
	t.Parallel()
	f, _ := newFakeServer(t)
	s, err := OpenURL(t.Context(), "kurrentdb://"+f.addr+"?tls=false&maxDiscoverAttempts=3&discoveryInterval=10")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	s.log = discard
	const stream = "queue-r"
	batch := storetest.NewEvents("test.r", 2)
	first := mustAppend(t, s, stream, eventstore.Any, batch...)
	f.shutdown()
	f.start(t)
	waitfor.That(t, "the store to answer Head again", func() bool { _, err := s.Head(t.Context()); return err == nil })
	res, err := s.Append(t.Context(), stream, eventstore.Any, batch...)
	if err != nil || res != first {
		t.Fatalf("Any retry at the tail after a restart: %+v, %v; want %+v", res, err, first)
	}
	mustAppend(t, s, stream, eventstore.Any, storetest.NewEvents("test.later", 2)...)
	f.shutdown()
	f.start(t)
	waitfor.That(t, "the store to answer Head again", func() bool { _, err := s.Head(t.Context()); return err == nil })
	res, err = s.Append(t.Context(), stream, eventstore.Any, batch...)
	if err != nil || res.Version != 5 {
		t.Fatalf("Any retry deep in the stream after a restart: %+v, %v; want it written again at version 5 (the documented gap)", res, err)
	}
}

// TestBoundedCache: the server's cache of recent ids is bounded; an Any retry
// of a batch that has left both the cache and the tail is written again,
// with a partial hit a wrong version, which the store reports as a conflict.
func TestBoundedCache(t *testing.T) {
	t.Parallel()
	f, s := openFake(t, Options{})
	f.cacheLimit = 3
	const stream = "queue-b"
	batch := storetest.NewEvents("test.b", 2)
	mustAppend(t, s, stream, eventstore.Any, batch...)
	mustAppend(t, s, stream, eventstore.Any, storetest.NewEvents("test.x", 2)...) // batch[0] leaves the cache
	if _, err := s.Append(t.Context(), stream, eventstore.Any, batch[1], batch[0]); !errors.Is(err, eventstore.ErrIdempotencyConflict) {
		t.Fatalf("ids reordered: %v; want ErrIdempotencyConflict", err)
	}
}

// TestLostExactRace: a lost race on Exact costs a read of what the other
// writer added, not a scan of the stream's idempotency window: the server
// has already checked the ids where the batch would be.
func TestLostExactRace(t *testing.T) {
	t.Parallel()
	f, s := openFake(t, Options{})
	const stream = "queue-long"
	for v := uint64(0); v < 2000; v += 500 {
		expected := eventstore.NoStream
		if v > 0 {
			expected = eventstore.Exact(v - 1)
		}
		mustAppend(t, s, stream, expected, storetest.NewEvents("test.fill", 500)...)
	}
	mustAppend(t, s, stream, eventstore.Exact(1999), storetest.NewEvent("test.winner", nil))
	before := f.sent.Load()
	_, err := s.Append(t.Context(), stream, eventstore.Exact(1999), storetest.NewEvents("test.loser", 2)...)
	var wv *eventstore.WrongVersionError
	if !errors.As(err, &wv) || wv.Actual != 2000 {
		t.Fatalf("the losing append: %v; want a WrongVersionError at 2000", err)
	}
	if n := f.sent.Load() - before; n > 10 {
		t.Fatalf("the losing append read %d events; a lost race should read the stream's tail only", n)
	}
}

// TestRetryBelowTheSearchFloor: a retry whose expected version is past the
// batch (no writer does that, but the contract allows it) still finds it:
// the search goes on below its floor once it has met some of the ids.
func TestRetryBelowTheSearchFloor(t *testing.T) {
	t.Parallel()
	_, s := openFake(t, Options{})
	batch := storetest.NewEvents("test.f", 5)
	first := mustAppend(t, s, "execution-f", eventstore.NoStream, batch...)
	mustAppend(t, s, "execution-f", eventstore.Exact(4), storetest.NewEvents("test.later", 6)...)
	res, err := s.Append(t.Context(), "execution-f", eventstore.Exact(7), batch...)
	if err != nil || res != first {
		t.Fatalf("retry with Exact(7): %+v, %v; want %+v", res, err, first)
	}
}
