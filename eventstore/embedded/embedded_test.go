package embedded

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		removeBenchLogs()
		os.Exit(code)
	}))
}

// TestConformance runs the shared eventstore conformance suite against a
// fresh store in a temporary directory, durable (fsync on) as in production.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) eventstore.Store {
		s, err := Open(t.TempDir(), Options{})
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
