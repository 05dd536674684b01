// Package storetest is the conformance suite for eventstore.Store. Every backend's
// tests call Run with a constructor for fresh, empty stores; passing Run means the
// backend keeps the contract written in package eventstore: expected versions,
// 0-based contiguous stream versions, strictly increasing global positions,
// idempotent re-appends, atomic multi-stream appends, gap-free ordered
// subscriptions, the input limits and their typed errors, and Close; and,
// for a backend that keeps them, the hash chain (Chain) and trimming (Trim).
//
// A backend that cannot do something the contract allows to vary says so in
// Capabilities; the affected checks are then skipped with t.Skip and a reason,
// never silently weakened.
package storetest

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// Capabilities describes what a backend does beyond the minimum contract. The
// zero value asks only for the minimum; set a field to true when the backend has
// the capability, so the suite checks it too.
type Capabilities struct {
	// DensePositions: global positions are 0, 1, 2, … with no holes, so the
	// position of the n-th committed event is n-1 and Head is the event count.
	// Without it the suite only requires positions to be strictly increasing in
	// commit order (PostgreSQL sequences, KurrentDB commit positions).
	DensePositions bool

	// AtomicMultiStream: AppendMulti is all-or-nothing across streams and its
	// events are contiguous in the log. Without it the AppendMulti group, the
	// Idempotency/Multi checks and the AppendMulti halves of the Input checks
	// are skipped (KurrentDB servers without multi-stream appends).
	AtomicMultiStream bool

	// SkipSlow skips the subtests that need hundreds or thousands of appends
	// (Subscribe/ConcurrentWriters, Head/BelowHeadReadableUnderConcurrency,
	// Concurrency/OneStreamAny, AppendMulti/ContiguousUnderConcurrency), for
	// backends where each append is expensive. The suite also skips them under
	// go test -short. Concurrency/OneStreamExactRetry always runs.
	SkipSlow bool
}

// Run runs the whole conformance suite as subtests named group/check, e.g.
// "Subscribe/ConcurrentWriters", so a backend can select them with -run. Each
// subtest calls newStore for a fresh, empty store of its own (the suite checks
// that it is empty); newStore must register the store's cleanup (Close and
// removal of its data) with t.Cleanup, and must tolerate Close having been
// called already by the test. Subtests run in parallel.
func Run(t *testing.T, newStore func(t *testing.T) eventstore.Store, caps Capabilities) {
	t.Helper()
	s := suite{newStore: newStore, caps: caps}
	groups := []struct {
		name  string
		tests []subtest
	}{
		{"ExpectedVersion", s.expectedVersionTests()},
		{"Append", s.appendTests()},
		{"Idempotency", s.idempotencyTests()},
		{"AppendMulti", s.appendMultiTests()},
		{"Read", s.readTests()},
		{"Head", s.headTests()},
		{"Concurrency", s.concurrencyTests()},
		{"Subscribe", s.subscribeTests()},
		{"Input", s.inputTests()},
		{"Close", s.closeTests()},
		{"Chain", s.chainTests()},
		{"Trim", s.trimTests()},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, st := range g.tests {
				t.Run(st.name, func(t *testing.T) {
					if st.slow {
						s.skipIfSlow(t)
					}
					t.Parallel()
					store := s.newStore(t)
					requireEmpty(t, store)
					st.run(t, store)
				})
			}
		})
	}
}

// subtest is one named check of the suite.
type subtest struct {
	name string
	run  func(t *testing.T, st eventstore.Store)
	slow bool // many appends: skipped with SkipSlow or -short
}

type suite struct {
	newStore func(t *testing.T) eventstore.Store
	caps     Capabilities
}

func (s suite) skipIfSlow(t *testing.T) {
	t.Helper()
	if s.caps.SkipSlow {
		t.Skip("skipped: the backend set Capabilities.SkipSlow (many appends)")
	}
	if testing.Short() {
		t.Skip("skipped in -short mode (many appends)")
	}
}

func (s suite) needDense(t *testing.T) {
	t.Helper()
	if !s.caps.DensePositions {
		t.Skip("skipped: the backend does not promise dense positions (Capabilities.DensePositions)")
	}
}

func (s suite) needAtomicMulti(t *testing.T) {
	t.Helper()
	if !s.caps.AtomicMultiStream {
		t.Skip("skipped: the backend cannot append to several streams atomically (Capabilities.AtomicMultiStream)")
	}
}

// NewEvent returns an event ready to append: a fresh random id, the given type,
// schema version 1, owner executor, and data encoded as JSON. Data that is
// already a json.RawMessage or []byte is used as is. It panics if data cannot be
// encoded, which is a bug in the calling test.
func NewEvent(typ string, data any) domain.Envelope {
	var raw json.RawMessage
	switch d := data.(type) {
	case json.RawMessage:
		raw = append(json.RawMessage(nil), d...)
	case []byte:
		raw = append(json.RawMessage(nil), d...)
	default:
		b, err := json.Marshal(data)
		if err != nil {
			panic(fmt.Sprintf("storetest.NewEvent: encoding data of %q: %v", typ, err))
		}
		raw = b
	}
	return domain.Envelope{
		ID:            uuid.New(),
		Type:          typ,
		SchemaVersion: 1,
		Owner:         domain.OwnerExecutor,
		Data:          raw,
	}
}

// NewEvents returns n events of the given type made by NewEvent, each with data
// {"n": i} for i in 0..n-1.
func NewEvents(typ string, n int) []domain.Envelope {
	evs := make([]domain.Envelope, n)
	for i := range evs {
		evs[i] = NewEvent(typ, map[string]int{"n": i})
	}
	return evs
}
