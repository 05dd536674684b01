package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

// A store with a simulated clock: append with an expected version, lose a
// race, and follow the log with a subscription.
func Example() {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.Options{Clock: func() time.Time { return now }})
	defer func() { _ = store.Close() }()
	ctx := context.Background()

	res, _ := store.Append(ctx, "execution-1", eventstore.NoStream,
		storetest.NewEvent("execution.scheduled", map[string]string{"action": "demo.sleep"}),
		storetest.NewEvent("execution.started", nil))
	fmt.Println("appended up to version", res.Version, "at position", res.Position)

	_, err := store.Append(ctx, "execution-1", eventstore.Exact(0), storetest.NewEvent("execution.started", nil))
	var wrong *eventstore.WrongVersionError
	if errors.As(err, &wrong) {
		fmt.Println("lost the race: the stream is at version", wrong.Actual)
	}

	ctx, cancel := context.WithCancel(ctx)
	err = store.Subscribe(ctx, 0, eventstore.Filter{Types: []string{"execution.started"}}, func(batch []domain.Envelope) error {
		for _, e := range batch {
			fmt.Println(e.Position, e.Stream, e.Version, e.Type, e.Time.Format(time.RFC3339))
		}
		cancel()
		return nil
	})
	fmt.Println("subscription ended:", err)
	// Output:
	// appended up to version 1 at position 1
	// lost the race: the stream is at version 1
	// 1 execution-1 1 execution.started 2030-01-01T12:00:00Z
	// subscription ended: context canceled
}
