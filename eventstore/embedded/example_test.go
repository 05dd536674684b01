package embedded_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/embedded"
)

func Example() {
	dir, err := os.MkdirTemp("", "turnstile-example-")
	if err != nil {
		panic(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()

	store, err := embedded.Open(dir, embedded.Options{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	scheduled := domain.Envelope{
		ID:            uuid.New(),
		Type:          "execution.scheduled",
		SchemaVersion: 1,
		Owner:         domain.OwnerExecutor,
		Data:          json.RawMessage(`{"action":"demo.sleep"}`),
	}
	// NoStream: the execution must be new. The event is on disk when Append returns.
	res, err := store.Append(ctx, "execution-42", eventstore.NoStream, scheduled)
	if err != nil {
		panic(err)
	}
	fmt.Printf("appended at version %d, position %d\n", res.Version, res.Position)

	// Appending the same event again is a no-op that returns the same place.
	again, err := store.Append(ctx, "execution-42", eventstore.NoStream, scheduled)
	fmt.Println("re-append:", again == res, err)

	if err := store.Close(); err != nil {
		panic(err)
	}

	// Reopened, the store has it all.
	store, err = embedded.Open(dir, embedded.Options{})
	if err != nil {
		panic(err)
	}
	defer func() { _ = store.Close() }()
	events, err := store.ReadStream(ctx, "execution-42", 0, 10)
	if err != nil {
		panic(err)
	}
	fmt.Println(events[0].Type, string(events[0].Data))
	// Output:
	// appended at version 0, position 0
	// re-append: true <nil>
	// execution.scheduled {"action":"demo.sleep"}
}
