package eventstore_test

import (
	"testing"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

// hides is a wrapper that does not forward the capability.
type hides struct{ eventstore.Store }

// TestAtomicMultiStreamDefault: a store is atomic across streams only if
// it says so; a wrapper that does not forward the answer is taken not to
// be, so writers take the single-stream path, which is right on any store.
func TestAtomicMultiStreamDefault(t *testing.T) {
	t.Parallel()
	mem := memstore.New(memstore.Options{})
	for _, c := range []struct {
		name string
		s    eventstore.Store
		want bool
	}{
		{"memstore", mem, true},
		{"a wrapper that does not forward", hides{mem}, false},
		{"single-stream", storetest.SingleStream(mem), false},
	} {
		if got := eventstore.AtomicMultiStream(c.s); got != c.want {
			t.Errorf("%s: AtomicMultiStream = %v, want %v", c.name, got, c.want)
		}
	}
}
