package eventstore_test

import (
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// A Chainer hashes event after event without allocating: the embedded
// store's committer runs one on every event it commits.
func TestChainerDoesNotAllocate(t *testing.T) {
	var c eventstore.Chainer
	e := chainEvent()
	var prev domain.Hash
	prev = c.Next(prev, &e) // grow the buffer once
	if n := testing.AllocsPerRun(100, func() { prev = c.Next(prev, &e) }); n != 0 {
		t.Fatalf("Chainer.Next allocates %v times per event, want 0", n)
	}
}
