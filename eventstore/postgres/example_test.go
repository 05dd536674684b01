package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/postgres"
)

// The example runs against the database in TURNSTILE_POSTGRES_URL (see
// scripts/with-postgres.sh), in a schema of its own that it drops at the end.
func Example() {
	ctx := context.Background()
	dbURL, schema := os.Getenv("TURNSTILE_POSTGRES_URL"), "example_"+strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if dbURL == "" {
		panic("TURNSTILE_POSTGRES_URL is not set: run scripts/with-postgres.sh go test ./eventstore/postgres/")
	}
	defer dropSchema(ctx, dbURL, schema)

	// Migrations are explicit: `turnstile migrate` does this. Open never does.
	if _, err := postgres.MigrateURL(ctx, dbURL, schema); err != nil {
		panic(err)
	}
	// postgres://user:pass@host:port/db?sslmode=…; the schema may also be
	// given as a "schema" parameter of the URL.
	store, err := postgres.OpenURL(ctx, dbURL, postgres.Options{Schema: schema})
	if err != nil {
		panic(err)
	}
	defer func() { _ = store.Close() }()

	scheduled := domain.Envelope{
		ID:            uuid.New(),
		Type:          "execution.scheduled",
		SchemaVersion: 1,
		Owner:         domain.OwnerExecutor,
		Data:          json.RawMessage(`{"action":"demo.sleep"}`),
	}
	// NoStream: the execution must be new. The event is committed when Append returns.
	res, err := store.Append(ctx, "execution-42", eventstore.NoStream, scheduled)
	if err != nil {
		panic(err)
	}
	fmt.Printf("appended at version %d, position %d\n", res.Version, res.Position)

	// Appending the same event again is a no-op that returns the same place.
	again, err := store.Append(ctx, "execution-42", eventstore.NoStream, scheduled)
	fmt.Println("re-append:", again == res, err)

	// A stale expected version is the typed wrong-version error.
	_, err = store.Append(ctx, "execution-42", eventstore.NoStream, domain.Envelope{
		ID: uuid.New(), Type: "execution.running", Owner: domain.OwnerWorker, Data: json.RawMessage(`{}`),
	})
	fmt.Println(err)

	events, err := store.ReadStream(ctx, "execution-42", 0, 10)
	if err != nil {
		panic(err)
	}
	fmt.Println(events[0].Type, string(events[0].Data))
	// Output:
	// appended at version 0, position 0
	// re-append: true <nil>
	// append to "execution-42": expected no stream, stream is at version 0: wrong expected version
	// execution.scheduled {"action":"demo.sleep"}
}

func dropSchema(ctx context.Context, dbURL, schema string) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		panic(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
		panic(err)
	}
}
