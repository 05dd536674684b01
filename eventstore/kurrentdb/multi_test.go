package kurrentdb

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

// TestMultiStreamDetected: AtomicMultiStream is true only on a server whose
// GetSupportedMethods lists AppendRecords (26.0.3, 26.1+), and only with a
// connection for it; a server without ServerFeatures, or 25.1 (which has
// AppendSession only) and 26.0.2, keep the single-stream path.
func TestMultiStreamDetected(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		version string
		conn    bool
		want    bool
	}{
		{"", true, false},
		{"24.10.0", true, false},
		{"25.1.2", true, false},
		{"26.0.2", true, false},
		{"26.0.3", true, true},
		{"26.1.0", true, true},
		{"26.1.0", false, false},
		{"27.0.0", true, true},
	} {
		f, client := newFakeServerOf(t, c.version)
		opts := Options{Logger: discard}
		if c.conn {
			opts.MultiStreamConn = f.dial(t)
		}
		s, err := Open(client, opts)
		if err != nil {
			t.Fatalf("server %q: Open: %v", c.version, err)
		}
		if got := s.AtomicMultiStream(); got != c.want {
			t.Errorf("server %q, connection %v: AtomicMultiStream = %v, want %v", c.version, c.conn, got, c.want)
		}
		_ = s.Close()
	}
}

// TestMultiStreamServerDowngraded: a store that detected AppendRecords and
// then reaches a server without it (a fail-over to an older node) refuses
// AppendMulti of several streams with ErrMultiStream and writes nothing,
// rather than appending stream by stream.
func TestMultiStreamServerDowngraded(t *testing.T) {
	t.Parallel()
	f, client := newFakeServerOf(t, "26.1.0")
	s, err := Open(client, Options{Logger: discard, MultiStreamConn: f.dial(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.AtomicMultiStream() {
		t.Fatal("AtomicMultiStream is false on a 26.1 server")
	}
	f.stop()
	f.version = "25.1.0"
	f.start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err = s.AppendMulti(ctx,
		eventstore.StreamAppend{Stream: "execution-d", Expected: eventstore.NoStream, Events: storetest.NewEvents("test.d", 1)},
		eventstore.StreamAppend{Stream: "worker-d", Expected: eventstore.Any, Events: storetest.NewEvents("test.d", 1)})
	for err != nil && errors.Is(err, ErrUnavailable) { // the connection comes back
		_, err = s.AppendMulti(ctx,
			eventstore.StreamAppend{Stream: "execution-d", Expected: eventstore.NoStream, Events: storetest.NewEvents("test.d", 1)},
			eventstore.StreamAppend{Stream: "worker-d", Expected: eventstore.Any, Events: storetest.NewEvents("test.d", 1)})
	}
	if !errors.Is(err, ErrMultiStream) || !errors.Is(err, eventstore.ErrMultiStream) {
		t.Fatalf("AppendMulti on a server without AppendRecords: %v, want ErrMultiStream", err)
	}
	for _, stream := range []string{"execution-d", "worker-d"} {
		if _, err := s.ReadStream(ctx, stream, 0, 10); !errors.Is(err, eventstore.ErrStreamNotFound) {
			t.Errorf("ReadStream(%q) after the refused AppendMulti: %v, want ErrStreamNotFound", stream, err)
		}
	}
}

// TestOpenURLMultiStream: OpenURL of a single node takes the multi-stream
// path on a server with AppendRecords, and writes several streams at once
// there; on an older server it keeps the single-stream path.
func TestOpenURLMultiStream(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		version string
		want    bool
	}{{"25.1.0", false}, {"26.1.0", true}} {
		f, _ := newFakeServerOf(t, c.version)
		s, err := OpenURL(t.Context(), "kurrentdb://"+f.addr+"?tls=false&maxDiscoverAttempts=1")
		if err != nil {
			t.Fatalf("%s: OpenURL: %v", c.version, err)
		}
		if got := s.AtomicMultiStream(); got != c.want {
			t.Errorf("%s: AtomicMultiStream = %v, want %v", c.version, got, c.want)
		}
		_, err = s.AppendMulti(t.Context(),
			eventstore.StreamAppend{Stream: "execution-u", Expected: eventstore.NoStream, Events: storetest.NewEvents("test.u", 2)},
			eventstore.StreamAppend{Stream: "worker-u", Expected: eventstore.NoStream, Events: storetest.NewEvents("test.u", 1)})
		if c.want && err != nil {
			t.Errorf("%s: AppendMulti: %v", c.version, err)
		}
		if !c.want && !errors.Is(err, ErrMultiStream) {
			t.Errorf("%s: AppendMulti: %v, want ErrMultiStream", c.version, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDialMultiCluster: a cluster's connection string gets no connection
// for the multi-stream path (the leader is not looked for), so such a store
// keeps the single-stream path.
func TestDialMultiCluster(t *testing.T) {
	t.Parallel()
	for _, conn := range []string{
		"esdb://a:2113,b:2113,c:2113?tls=false",
		"esdb+discover://cluster.example:2113?tls=false",
	} {
		cfg, err := esdb.ParseConnectionString(conn)
		if err != nil {
			t.Fatal(err)
		}
		mc, err := dialMulti(cfg)
		if err != nil || mc != nil {
			t.Errorf("dialMulti(%s) = %v, %v; want nil, nil", conn, mc, err)
		}
	}
}

// TestMultiStreamRetryOtherContent: the same ids with other content, after
// later appends moved the batch out of the tails the store reads, are an
// idempotency conflict, not the original result: the server recognises a
// retry by its ids alone (for Any, from its cache of recent ids).
func TestMultiStreamRetryOtherContent(t *testing.T) {
	t.Parallel()
	f, client := newFakeServerOf(t, "26.1.0")
	s, err := Open(client, Options{Logger: discard, MultiStreamConn: f.dial(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	a, b := storetest.NewEvents("test.a", 2), storetest.NewEvents("test.b", 1)
	if _, err := s.AppendMulti(ctx,
		eventstore.StreamAppend{Stream: "execution-o", Expected: eventstore.Any, Events: a},
		eventstore.StreamAppend{Stream: "queue-o", Expected: eventstore.Any, Events: b}); err != nil {
		t.Fatal(err)
	}
	for _, stream := range []string{"execution-o", "queue-o"} {
		if _, err := s.Append(ctx, stream, eventstore.Any, storetest.NewEvents("test.later", 3)...); err != nil {
			t.Fatal(err)
		}
	}
	head, err := s.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other := append([]domain.Envelope(nil), a...)
	other[1].Data = json.RawMessage(`{"other":true}`)
	_, err = s.AppendMulti(ctx,
		eventstore.StreamAppend{Stream: "execution-o", Expected: eventstore.Any, Events: other},
		eventstore.StreamAppend{Stream: "queue-o", Expected: eventstore.Any, Events: b})
	if !errors.Is(err, eventstore.ErrIdempotencyConflict) {
		t.Fatalf("same ids, other content: %v, want ErrIdempotencyConflict", err)
	}
	if got, err := s.Head(ctx); err != nil || got != head {
		t.Fatalf("Head after the refused retry = %d, %v; want %d (nothing written)", got, err, head)
	}
}
