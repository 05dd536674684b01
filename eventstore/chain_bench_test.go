package eventstore_test

import (
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// BenchmarkChainerNext: the committer's cost per event (a typical event of
// the lifecycle: about 250 bytes hashed).
func BenchmarkChainerNext(b *testing.B) {
	var c eventstore.Chainer
	e := chainEvent()
	var prev domain.Hash
	b.ReportAllocs()
	for b.Loop() {
		prev = c.Next(prev, &e)
	}
}
