package kurrentdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"google.golang.org/grpc/codes"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/internal/waitfor"
)

// Behaviour of the store the conformance suite does not cover, on the fake
// server: what is KurrentDB-specific.

func openFake(t *testing.T, opts Options) (*fakeServer, *Store) {
	t.Helper()
	f, client := newFakeServer(t)
	if opts.Logger == nil {
		opts.Logger = discard
	}
	s, err := Open(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return f, s
}

func mustAppend(t *testing.T, s eventstore.Store, stream string, expected eventstore.ExpectedVersion, evs ...domain.Envelope) eventstore.AppendResult {
	t.Helper()
	res, err := s.Append(t.Context(), stream, expected, evs...)
	if err != nil {
		t.Fatalf("Append(%q, %s): %v", stream, expected, err)
	}
	return res
}

func mustReadAll(t *testing.T, s eventstore.Store) []domain.Envelope {
	t.Helper()
	evs, err := s.ReadAll(t.Context(), 0, 10_000)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	return evs
}

func TestAppendMulti(t *testing.T) {
	t.Parallel()
	_, s := openFake(t, Options{})
	ctx := t.Context()
	a := eventstore.StreamAppend{Stream: "queue-a", Expected: eventstore.NoStream, Events: storetest.NewEvents("test.a", 2)}
	x := eventstore.StreamAppend{Stream: "execution-x", Expected: eventstore.NoStream, Events: storetest.NewEvents("test.x", 1)}

	if eventstore.AtomicMultiStream(s) {
		t.Fatal("the store reports atomic multi-stream appends")
	}
	_, err := s.AppendMulti(ctx, a, x)
	if !errors.Is(err, ErrMultiStream) || !errors.Is(err, eventstore.ErrMultiStream) || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("AppendMulti of two streams: %v, want ErrMultiStream, eventstore.ErrMultiStream and errors.ErrUnsupported", err)
	}
	if evs := mustReadAll(t, s); len(evs) != 0 {
		t.Fatalf("a refused AppendMulti wrote %d events", len(evs))
	}
	// Bad input is reported as such, before the lack of support.
	bad := x
	bad.Stream = "bad stream"
	if _, err := s.AppendMulti(ctx, a, bad); !errors.Is(err, eventstore.ErrInvalidStream) {
		t.Fatalf("AppendMulti with a bad stream name: %v, want ErrInvalidStream", err)
	}
	if _, err := s.AppendMulti(ctx); !errors.Is(err, eventstore.ErrInvalidEvent) {
		t.Fatalf("AppendMulti of nothing: %v, want ErrInvalidEvent", err)
	}
	// One stream is an Append.
	res, err := s.AppendMulti(ctx, a)
	if err != nil {
		t.Fatalf("AppendMulti of one stream: %v", err)
	}
	evs := mustReadAll(t, s)
	if len(evs) != 2 || res.Version != 1 || res.Position != evs[1].Position {
		t.Fatalf("AppendMulti of one stream returned %+v; the log holds %d events", res, len(evs))
	}
	again, err := s.AppendMulti(ctx, a)
	if err != nil || again != res {
		t.Fatalf("AppendMulti of one stream, again: %+v, %v; want %+v (idempotent)", again, err, res)
	}
}

func TestReservedNames(t *testing.T) {
	t.Parallel()
	_, s := openFake(t, Options{})
	ctx := t.Context()
	if _, err := s.Append(ctx, "$execution-1", eventstore.Any, storetest.NewEvent("test.x", nil)); !errors.Is(err, eventstore.ErrInvalidStream) {
		t.Errorf("append to a $ stream: %v, want ErrInvalidStream", err)
	}
	if _, err := s.Append(ctx, "execution-1", eventstore.Any, storetest.NewEvent("$metadata", nil)); !errors.Is(err, eventstore.ErrInvalidEvent) {
		t.Errorf("append of a $ type: %v, want ErrInvalidEvent", err)
	}
	// The server holds $$execution-1 (a metadata stream): not readable here.
	if _, err := s.ReadStream(ctx, "$$execution-1", 0, 10); !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Errorf("read of a system stream: %v, want ErrStreamNotFound", err)
	}
}

// TestSystemAndForeignEvents: without a namespace every non-system stream is
// the store's, events written by others included; system events never show.
func TestSystemAndForeignEvents(t *testing.T) {
	t.Parallel()
	f, s := openFake(t, Options{})
	ctx := t.Context()
	if h, err := s.Head(ctx); err != nil || h != 0 {
		t.Fatalf("Head with only system events = %d, %v; want 0", h, err)
	}
	if evs := mustReadAll(t, s); len(evs) != 0 {
		t.Fatalf("ReadAll with only system events: %d events", len(evs))
	}
	ours := mustAppend(t, s, "execution-1", eventstore.NoStream, storetest.NewEvent("test.ours", nil))
	f.mu.Lock()
	foreign := *f.write("orders-1", "OrderPlaced", []byte(`{"order":1}`), []byte(`{"tenant":"x"}`))
	f.write("execution-1", "$>", []byte("0@orders-1"), nil) // a link in a user stream
	f.write("$stats-127.0.0.1:2113", "$statsCollected", []byte(`{}`), nil)
	f.mu.Unlock()

	evs := mustReadAll(t, s)
	if len(evs) != 2 || evs[0].Position != ours.Position || evs[1].Stream != "orders-1" {
		t.Fatalf("ReadAll = %+v, want our event and the foreign one", evs)
	}
	want := domain.Envelope{Stream: "orders-1", Version: 0, Position: foreign.pos << 1, ID: foreign.id, Type: "OrderPlaced",
		Time: evs[1].Time, Data: json.RawMessage(`{"order":1}`), Metadata: json.RawMessage(`{"tenant":"x"}`)}
	if err := sameEnvelope(&want, &evs[1]); err != nil {
		t.Fatalf("the foreign event: %v", err)
	}
	if h, err := s.Head(ctx); err != nil || h != after(evs[1].Position) {
		t.Fatalf("Head = %d, %v; want %d, after the foreign event (system events after it do not count)", h, err, after(evs[1].Position))
	}
	got := subscribeN(t, s, 0, eventstore.Filter{}, 2)
	if len(got) != 2 || got[0].ID != evs[0].ID || got[1].ID != evs[1].ID {
		t.Fatalf("Subscribe delivered %+v, want the two events of ReadAll", got)
	}

	// In a namespace, neither shows.
	ns, err := Open(s.conn().Client, Options{Namespace: "app-", Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if evs := mustReadAll(t, ns); len(evs) != 0 {
		t.Fatalf("ReadAll in an empty namespace: %+v", evs)
	}
	if h, err := ns.Head(ctx); err != nil || h != 0 {
		t.Fatalf("Head of an empty namespace = %d, %v; want 0", h, err)
	}
}

// subscribeN subscribes until n events have arrived and returns them.
func subscribeN(t *testing.T, s eventstore.Store, from uint64, f eventstore.Filter, n int) []domain.Envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var got []domain.Envelope
	err := s.Subscribe(ctx, from, f, func(b []domain.Envelope) error {
		got = append(got, b...)
		if len(got) >= n {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Subscribe: %v after %d of %d events", err, len(got), n)
	}
	return got
}

func TestReadAllPositions(t *testing.T) {
	t.Parallel()
	_, s := openFake(t, Options{})
	ctx := t.Context()
	mustAppend(t, s, "execution-1", eventstore.NoStream, storetest.NewEvents("test.p", 3)...)
	all := mustReadAll(t, s)
	for _, c := range []struct {
		from  uint64
		want  int // index in all of the first event returned; len(all): none
		fails bool
	}{
		{0, 0, false},
		{all[1].Position, 1, false},        // an event: inclusive
		{after(all[1].Position), 2, false}, // just after it
		{after(all[2].Position), 3, false}, // after the last: Head
		{all[2].Position + 100, 3, false},  // past the end of the log
		{1 << 50, 3, false},                // far past it
		{all[1].Position + 2, 0, true},     // not an event, inside the log: the server refuses
	} {
		got, err := s.ReadAll(ctx, c.from, 10)
		if c.fails {
			if err == nil {
				t.Errorf("ReadAll(%d), not an event's position inside the log, succeeded with %d events", c.from, len(got))
			}
			continue
		}
		if err != nil || len(got) != len(all)-c.want || (len(got) > 0 && got[0].ID != all[c.want].ID) {
			t.Errorf("ReadAll(%d) = %d events, %v; want all[%d:]", c.from, len(got), err, c.want)
		}
	}
}

func TestStreamReadPositions(t *testing.T) {
	t.Parallel()
	for _, withCommit := range []bool{false, true} {
		t.Run(fmt.Sprintf("commit=%v", withCommit), func(t *testing.T) {
			t.Parallel()
			f, s := openFake(t, Options{})
			f.streamCommit = withCommit
			mustAppend(t, s, "queue-q", eventstore.NoStream, storetest.NewEvents("test.q", 3)...)
			mustAppend(t, s, "worker-w", eventstore.NoStream, storetest.NewEvents("test.w", 2)...)
			mustAppend(t, s, "queue-q", eventstore.Exact(2), storetest.NewEvents("test.q", 2)...)
			all := mustReadAll(t, s)
			byID := map[string]uint64{}
			for _, e := range all {
				byID[e.ID.String()] = e.Position
			}
			evs, err := s.ReadStream(t.Context(), "queue-q", 0, 10)
			if err != nil || len(evs) != 5 {
				t.Fatalf("ReadStream = %d events, %v", len(evs), err)
			}
			for _, e := range evs {
				if p := byID[e.ID.String()]; e.Position != p {
					t.Errorf("event %s: ReadStream says position %d, ReadAll %d", e.ID, e.Position, p)
				}
			}
		})
	}
}

// TestRetriedAppends: the retries the server recognises, the ones the store
// recognises, and the limit of its window.
func TestRetriedAppends(t *testing.T) {
	t.Parallel()
	_, s := openFake(t, Options{IdempotencyWindow: 4})
	ctx := t.Context()
	batch := storetest.NewEvents("test.b", 2)
	first := mustAppend(t, s, "execution-r", eventstore.NoStream, batch...)
	mustAppend(t, s, "execution-r", eventstore.Exact(1), storetest.NewEvents("test.later", 2)...)
	count := len(mustReadAll(t, s))

	// NoStream, behind the stream: the server matches the ids after it and
	// acknowledges without writing; the store reads the position back.
	res, err := s.Append(ctx, "execution-r", eventstore.NoStream, batch...)
	if err != nil || res != first {
		t.Fatalf("retry with NoStream: %+v, %v; want %+v", res, err, first)
	}
	// Exact(0), stale and not matching: the server says wrong version, the
	// store finds the batch.
	res, err = s.Append(ctx, "execution-r", eventstore.Exact(0), batch...)
	if err != nil || res != first {
		t.Fatalf("retry with a stale Exact(0): %+v, %v; want %+v", res, err, first)
	}
	if n := len(mustReadAll(t, s)); n != count {
		t.Fatalf("retries wrote %d events", n-count)
	}
	// Once the batch is deeper than the window, a stale retry is a wrong
	// version again.
	mustAppend(t, s, "execution-r", eventstore.Exact(3), storetest.NewEvents("test.more", 2)...)
	_, err = s.Append(ctx, "execution-r", eventstore.Exact(0), batch...)
	var wv *eventstore.WrongVersionError
	if !errors.As(err, &wv) || !wv.Exists || wv.Actual != 5 || wv.Stream != "execution-r" {
		t.Fatalf("stale retry beyond the window: %v, want a WrongVersionError at version 5", err)
	}
	// The same ids with other content are a conflict, not a retry.
	withTail := storetest.NewEvents("test.t", 1)
	mustAppend(t, s, "queue-c", eventstore.NoStream, withTail...)
	withTail[0].Data = json.RawMessage(`{"other":true}`)
	if _, err := s.Append(ctx, "queue-c", eventstore.Any, withTail...); !errors.Is(err, eventstore.ErrIdempotencyConflict) {
		t.Fatalf("an id at the tail with other content: %v, want ErrIdempotencyConflict", err)
	}
}

func TestWrongVersionFallback(t *testing.T) {
	t.Parallel()
	_, s := openFake(t, Options{})
	mustAppend(t, s, "execution-w", eventstore.NoStream, storetest.NewEvents("test.w", 3)...)
	// An *esdb.Error whose message this package does not recognise, as
	// another client version might write it: the store asks the server.
	other, _ := esdb.FromError(errors.New("expected revision mismatch"))
	for _, c := range []struct {
		stream string
		exists bool
		actual uint64
	}{{"execution-w", true, 2}, {"execution-none", false, 0}} {
		err := s.wrongVersion(t.Context(), c.stream, eventstore.Exact(7), other)
		var wv *eventstore.WrongVersionError
		if !errors.As(err, &wv) || wv.Exists != c.exists || (c.exists && wv.Actual != c.actual) || wv.Expected != eventstore.Exact(7) {
			t.Errorf("%s: wrongVersion = %v, want exists %v at %d", c.stream, err, c.exists, c.actual)
		}
	}
}

// TestSubscribeAfterDrop: a subscription the server drops as unavailable
// resumes after the last event delivered, with no gap and no duplicate (so
// does one it drops with CANCELLED while the caller's context is alive); one
// dropped for another reason ends with that reason.
func TestSubscribeAfterDrop(t *testing.T) {
	t.Parallel()
	f, s := openFake(t, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	mustAppend(t, s, "execution-1", eventstore.NoStream, storetest.NewEvents("test.d", 3)...)
	sub := collect(ctx, s)
	waitfor.That(t, "the subscription to have 3 events", func() bool { return sub.count() == 3 })
	f.dropSubscriptions(codes.Unavailable)
	mustAppend(t, s, "execution-1", eventstore.Exact(2), storetest.NewEvents("test.d", 2)...)
	waitfor.That(t, "the subscription to have 5 events", func() bool { return sub.count() == 5 })
	f.dropSubscriptions(codes.Aborted)
	mustAppend(t, s, "execution-2", eventstore.NoStream, storetest.NewEvents("test.d", 1)...)
	waitfor.That(t, "the subscription to have 6 events", func() bool { return sub.count() == 6 })
	// A node shutting down or losing its leadership sends CANCELLED: not the
	// caller's cancellation.
	f.dropSubscriptions(codes.Canceled)
	mustAppend(t, s, "execution-2", eventstore.Exact(0), storetest.NewEvents("test.d", 1)...)
	waitfor.That(t, "the subscription to have 7 events", func() bool { return sub.count() == 7 })

	f.dropSubscriptions(codes.PermissionDenied)
	select {
	case err := <-sub.done:
		if !errors.Is(err, ErrAccessDenied) {
			t.Fatalf("Subscribe dropped for permissions: %v, want ErrAccessDenied", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe did not end after a non-transient drop")
	}
	sub.isLog(t, s)
}

// TestAppendDeadline: the caller's deadline governs an append, not the
// client's default deadline; without one the client's applies.
func TestAppendDeadline(t *testing.T) {
	t.Parallel()
	f, _ := newFakeServer(t)
	f.hook = func(ctx context.Context, method string) error {
		if method == "append" {
			select {
			case <-time.After(300 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	s, err := Open(f.newClient(t, "&defaultDeadline=100"), Options{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := s.Append(ctx, "execution-1", eventstore.Any, storetest.NewEvent("test.slow", nil)); err != nil {
		t.Fatalf("append with 5s left, slower than the client's 100ms default: %v", err)
	}
	_, err = s.Append(context.Background(), "execution-1", eventstore.Any, storetest.NewEvent("test.slow", nil))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("append with no deadline of its own, slower than the client's default: %v, want context.DeadlineExceeded", err)
	}
}

func TestOrigin(t *testing.T) {
	t.Parallel()
	_, s := openFake(t, Options{})
	old := mustAppend(t, s, "execution-old", eventstore.NoStream, storetest.NewEvent("test.old", nil))
	origin, err := LogEnd(t.Context(), s.conn().Client)
	if err != nil || origin != after(old.Position) {
		t.Fatalf("LogEnd = %d, %v; want %d", origin, err, after(old.Position))
	}
	later, err := Open(s.conn().Client, Options{Origin: origin, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := later.Head(t.Context()); err != nil || h != 0 {
		t.Fatalf("Head of a store whose origin is after every event = %d, %v; want 0", h, err)
	}
	if evs := mustReadAll(t, later); len(evs) != 0 {
		t.Fatalf("ReadAll before the origin: %d events", len(evs))
	}
	res := mustAppend(t, later, "execution-new", eventstore.NoStream, storetest.NewEvent("test.new", nil))
	if evs := mustReadAll(t, later); len(evs) != 1 || evs[0].Position != res.Position {
		t.Fatalf("ReadAll after the origin = %+v, want the one new event", evs)
	}
	if got := subscribeN(t, later, 0, eventstore.Filter{}, 1); got[0].Position != res.Position {
		t.Fatalf("Subscribe from 0 delivered %+v first, want the event after the origin", got[0])
	}
}

func TestOpenURL(t *testing.T) {
	t.Parallel()
	f, _ := newFakeServer(t)
	ctx := t.Context()
	s, err := OpenURL(ctx, "kurrentdb://"+f.addr+"?tls=false&namespace=u-&maxDiscoverAttempts=1")
	if err != nil {
		t.Fatalf("OpenURL: %v", err)
	}
	res := mustAppend(t, s, "execution-1", eventstore.NoStream, storetest.NewEvent("test.url", nil))
	if s.ns != "u-" {
		t.Fatalf("namespace %q, want u-", s.ns)
	}
	other, err := Open(s.conn().Client, Options{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := other.ReadStream(ctx, "u-execution-1", 0, 10)
	if err != nil || len(evs) != 1 || evs[0].Position != res.Position {
		t.Fatalf("the event on the server: %+v, %v", evs, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The store owned its client: closed with it.
	if _, err := other.Head(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a call on the closed client: %v, want ErrUnavailable", err)
	}
	if _, err := s.Head(ctx); !errors.Is(err, eventstore.ErrClosed) {
		t.Fatalf("Head after Close: %v, want ErrClosed", err)
	}

	start := time.Now()
	_, err = OpenURL(ctx, "kurrentdb://admin:secret@127.0.0.1:1?tls=false&maxDiscoverAttempts=1")
	if err == nil || !strings.Contains(err.Error(), "cannot reach") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("OpenURL of a port nobody listens on: %v, want a 'cannot reach' error without the password", err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("OpenURL took %v to fail", d)
	}
	if _, err := OpenURL(ctx, "postgres://x"); err == nil {
		t.Fatal("OpenURL of a postgres URL succeeded")
	}
}

// TestSharedClient: Close of a store made by Open leaves the client open.
func TestSharedClient(t *testing.T) {
	t.Parallel()
	_, s := openFake(t, Options{Namespace: "a-"})
	b, err := Open(s.conn().Client, Options{Namespace: "b-", Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, b, "execution-1", eventstore.NoStream, storetest.NewEvent("test.b", nil))
	if _, err := Open(nil, Options{}); err == nil {
		t.Fatal("Open(nil) succeeded")
	}
	if _, err := Open(s.conn().Client, Options{Namespace: "$x"}); err == nil {
		t.Fatal("Open with an invalid namespace succeeded")
	}
}

// TestClientReplaced: the client closes itself for good when the server stays
// unreachable through a node discovery; a store from OpenURL replaces it, so
// it works again once the server is back, and its subscriptions resume. A
// store on the caller's client reports it instead.
func TestClientReplaced(t *testing.T) {
	t.Parallel()
	f, _ := newFakeServer(t)
	ctx := t.Context()
	s, err := OpenURL(ctx, "kurrentdb://"+f.addr+"?tls=false&maxDiscoverAttempts=1&discoveryInterval=10")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	s.log = discard
	// Not closed: calls stay stuck in it, and closing it under them would
	// make them panic (see client.go).
	cfg, err := esdb.ParseConnectionString("esdb://" + f.addr + "?tls=false&maxDiscoverAttempts=1&discoveryInterval=10")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = esdb.NoopLogging()
	sharedClient, err := esdb.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := Open(sharedClient, Options{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "execution-1", eventstore.NoStream, storetest.NewEvent("test.before", nil))
	sub := collect(ctx, s)
	waitfor.That(t, "the subscription to have 1 event", func() bool { return sub.count() == 1 })
	sharedDone := make(chan error, 1)
	go func() {
		sharedDone <- shared.Subscribe(ctx, 0, eventstore.Filter{}, func([]domain.Envelope) error { return nil })
	}()

	f.stop()
	// Calls fail while the server is down: the first on the broken
	// connection, the next through a failed discovery, after which the
	// client is closed for good. A call that enters the client while its
	// discovery fails hangs in the client forever: the store returns at the
	// caller's deadline.
	head := func(st *Store) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := st.Head(ctx)
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := head(shared)
		if clientGone(err) {
			break
		}
		if !errors.Is(err, ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Head on the shared client with the server down: %v, want ErrUnavailable or a deadline", err)
		}
		if err := head(s); !errors.Is(err, ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Head with the server down: %v, want ErrUnavailable or a deadline", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the shared client never closed itself")
		}
	}
	select {
	case err := <-sharedDone:
		if !clientGone(err) {
			t.Fatalf("subscription on a client that closed itself ended with %v", err)
		}
	case <-time.After(30 * time.Second): // generous: its retries back off, and CI machines are loaded
		t.Fatal("the subscription on the caller's closed client did not end")
	}
	f.start(t)
	waitfor.That(t, "the store to answer Head again", func() bool { return head(s) == nil })
	mustAppend(t, s, "execution-1", eventstore.Exact(0), storetest.NewEvent("test.after", nil))
	waitfor.That(t, "the subscription to have 2 events", func() bool { return sub.count() == 2 })
	if err := head(shared); !clientGone(err) {
		t.Fatalf("Head on the caller's closed client: %v, want its closed error", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-sub.done:
		if !errors.Is(err, eventstore.ErrClosed) {
			t.Fatalf("subscription after Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the subscription did not end at Close")
	}
}

// TestSubscribeBeyondEnd: a subscription from a position past the end of the
// log delivers the first events at or after it, and nothing below, even when
// the server drops it after the log has grown past that position (which
// need not be a record boundary).
func TestSubscribeBeyondEnd(t *testing.T) {
	t.Parallel()
	for _, drop := range []bool{false, true} {
		t.Run(fmt.Sprintf("drop=%v", drop), func(t *testing.T) {
			t.Parallel()
			f, s := openFake(t, Options{})
			ctx := t.Context()
			// Below the start: must not be delivered, though it passes the filter.
			first := mustAppend(t, s, "execution-1", eventstore.NoStream, storetest.NewEvent("test.wanted", nil))
			from := first.Position + 1000 // even, past the end: no record there yet
			var mu sync.Mutex
			var got []domain.Envelope
			sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			done := make(chan error, 1)
			// Without a drop, every event counts (the first at or after from
			// is delivered first); with one, only the wanted ones, so that
			// nothing is delivered before the drop.
			filter := eventstore.Filter{}
			if drop {
				filter.Types = []string{"test.wanted"}
			}
			go func() {
				done <- s.Subscribe(sctx, from, filter, func(b []domain.Envelope) error {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, b...)
					cancel()
					return nil
				})
			}()
			// The position must still be past the end when the subscription
			// starts: wait for the server to confirm it.
			waitfor.That(t, "one subscription on the server", func() bool { return f.subscriptions() == 1 })
			var written []domain.Envelope
			for len(written) == 0 || written[len(written)-1].Position < from {
				mustAppend(t, s, "execution-1", eventstore.Any, storetest.NewEvents("test.b", 3)...)
				written = mustReadAll(t, s)
			}
			if !drop {
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Fatalf("Subscribe: %v", err)
				}
				var want domain.Envelope
				for _, e := range written {
					if e.Position >= from {
						want = e
						break
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if len(got) == 0 || got[0].ID != want.ID {
					t.Fatalf("first delivery %+v, want the first event at or after %d (%s)", got, from, want.ID)
				}
				return
			}
			f.dropSubscriptions(codes.Unavailable)
			waitfor.That(t, "a second subscription on the server", func() bool { return f.subscriptions() >= 2 })
			mustAppend(t, s, "execution-1", eventstore.Any, storetest.NewEvent("test.wanted", nil))
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("Subscribe: %v", err)
			}
			written = mustReadAll(t, s)
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 || got[0].ID != written[len(written)-1].ID {
				t.Fatalf("delivered %+v, want the one wanted event at or after %d", got, from)
			}
		})
	}
}

// TestHeadPastLegacyTransactions: events of legacy (TCP API) transactions
// have no turnstile position; Head passes over those that are not the
// store's instead of failing, and resumes a page from such an event.
func TestHeadPastLegacyTransactions(t *testing.T) {
	t.Parallel()
	f, s := openFake(t, Options{Namespace: "app-"})
	ours := mustAppend(t, s, "execution-1", eventstore.NoStream, storetest.NewEvent("test.ours", nil))
	f.mu.Lock()
	f.writeTransaction("legacy-orders-1", "OrderPlaced", []byte(`{}`))
	for range pageSize - 1 { // the next page starts at the transaction's event
		f.write("$stats-127.0.0.1:2113", "$statsCollected", []byte(`{}`), nil)
	}
	f.mu.Unlock()
	if h, err := s.Head(t.Context()); err != nil || h != after(ours.Position) {
		t.Fatalf("Head = %d, %v; want %d, past another writer's transaction", h, err, after(ours.Position))
	}
	f.mu.Lock()
	f.writeTransaction("legacy-orders-2", "OrderPlaced", []byte(`{}`))
	f.mu.Unlock()
	if h, err := s.Head(t.Context()); err != nil || h != after(ours.Position) {
		t.Fatalf("Head = %d, %v; want %d, past another writer's transaction at the end", h, err, after(ours.Position))
	}
	if evs := mustReadAll(t, s); len(evs) != 1 {
		t.Fatalf("ReadAll = %d events, want ours", len(evs))
	}
}
