package postgres

import (
	"testing"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

// TestConformance runs the shared conformance suite, every store on a fresh
// schema of the test database.
func TestConformance(t *testing.T) {
	testURL(t)
	storetest.Run(t, func(t *testing.T) eventstore.Store {
		return newStore(t, Options{})
	}, storetest.Capabilities{DensePositions: true, AtomicMultiStream: true})
}
