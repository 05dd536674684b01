package kurrentdb

import (
	"context"
	"errors"
	"testing"
	"time"

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
