package eventstore_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// TestValidateAppendsStreamNamedTwice: a stream named twice is refused
// whether the append names a few streams (compared directly) or many (a map).
func TestValidateAppendsStreamNamedTwice(t *testing.T) {
	for _, n := range []int{2, 8, 9, 40} {
		appends := make([]eventstore.StreamAppend, n)
		for i := range appends {
			appends[i] = eventstore.StreamAppend{Stream: fmt.Sprintf("execution-%d", i), Expected: eventstore.Any,
				Events: []domain.Envelope{{ID: uuid.New(), Type: "test.e", SchemaVersion: 1, Owner: domain.OwnerExecutor}}}
		}
		if err := eventstore.ValidateAppends(appends); err != nil {
			t.Fatalf("%d distinct streams: %v", n, err)
		}
		appends[n-1].Stream = appends[n/2-1].Stream
		if err := eventstore.ValidateAppends(appends); !errors.Is(err, eventstore.ErrInvalidEvent) {
			t.Fatalf("%d streams, one named twice: %v, want ErrInvalidEvent", n, err)
		}
	}
}
