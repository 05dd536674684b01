package embedded

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

// TestMain runs the tests; TURNSTILE_TEST_HOT_EVENTS=n makes every store
// that does not set HotEvents seal after n events (or 1/32 of the
// sealed part), so that the tests cross the sealed/hot boundary many times,
// and TURNSTILE_TEST_SEGMENT_BYTES=n makes every store that does not set
// SegmentBytes start a segment file every n bytes.
func TestMain(m *testing.M) {
	if v := os.Getenv("TURNSTILE_TEST_HOT_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "TURNSTILE_TEST_HOT_EVENTS=%q: want a positive number\n", v)
			os.Exit(2)
		}
		defaultHotEvents = n
	}
	if v := os.Getenv("TURNSTILE_TEST_SEGMENT_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < MinSegmentBytes {
			fmt.Fprintf(os.Stderr, "TURNSTILE_TEST_SEGMENT_BYTES=%q: want a number from %d\n", v, MinSegmentBytes)
			os.Exit(2)
		}
		defaultSegmentBytes = n
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		removeBenchLogs()
		os.Exit(code)
	}))
}

// TestConformance runs the shared eventstore conformance suite against a
// fresh store in a temporary directory, durable (fsync on) as in production.
func TestConformance(t *testing.T) {
	conformance(t, Options{})
}

// TestConformanceSealing runs the conformance suite with a hot part of 7
// events: every test crosses the boundary between the sealed and the hot
// part many times (seals run in the background, as in production).
func TestConformanceSealing(t *testing.T) {
	conformance(t, Options{HotEvents: 7, NoSync: true})
}

// TestConformanceSegments runs the conformance suite on a log of the
// smallest segment files and a hot part of 7 events: every test crosses
// segment boundaries.
func TestConformanceSegments(t *testing.T) {
	conformance(t, Options{SegmentBytes: MinSegmentBytes, HotEvents: 7, NoSync: true})
}

func conformance(t *testing.T, opts Options) {
	storetest.Run(t, func(t *testing.T) eventstore.Store {
		s, err := Open(t.TempDir(), opts)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	}, storetest.Capabilities{DensePositions: true, AtomicMultiStream: true})
}
