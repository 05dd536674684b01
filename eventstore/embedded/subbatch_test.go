package embedded

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// TestSubscribeAcrossBatches: a subscription over more events than one
// batch (subBatch), from memory and from the log file (a store reopened
// keeps no events in memory), hands over every position once, in order:
// the first gap or repeat at a batch boundary fails at once.
func TestSubscribeAcrossBatches(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	total := 2*subBatch + 7
	for i := 0; i < total; i += 1000 {
		evs := make([]domain.Envelope, min(1000, total-i))
		for j := range evs {
			evs[j] = richEvent(i + j)
		}
		mustAppend(t, s, fmt.Sprintf("execution-b%d", i), eventstore.NoStream, evs...)
	}
	check := func(s *Store, where string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		next, batches := uint64(0), 0
		errDone := errors.New("done")
		err := s.Subscribe(ctx, 0, eventstore.Filter{}, func(b []domain.Envelope) error {
			batches++
			for i := range b {
				if b[i].Position != next {
					return fmt.Errorf("batch %d (%d events): position %d where %d was due", batches, len(b), b[i].Position, next)
				}
				next++
			}
			if next == uint64(total) {
				return errDone
			}
			return nil
		})
		if !errors.Is(err, errDone) {
			t.Fatalf("%s: subscription: %v (%d of %d events in %d batches)", where, err, next, total, batches)
		}
		if batches < 3 {
			t.Fatalf("%s: %d events came in %d batches: no batch boundary was crossed", where, total, batches)
		}
	}
	check(s, "from memory")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check(openT(t, dir, Options{}), "from the file")
}
