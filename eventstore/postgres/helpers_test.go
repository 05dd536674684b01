package postgres

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/internal/pgtest"
)

// sharedPool is the pool every test uses, opened on first use and closed
// by TestMain.
var sharedPool = pgtest.Pool{MaxConns: 40}

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv(pgtest.URLEnv) == "" && os.Getenv("CI") != "true" {
		// Tests skip without a database, but examples cannot: leave them
		// out unless asked for by name.
		if f := flag.Lookup("test.run"); f != nil && f.Value.String() == "" {
			_ = flag.Set("test.run", "^Test")
		}
	}
	code := m.Run()
	dropBenchLog()
	if err := sharedPool.Close(time.Minute); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// freshSchema returns the name of a new, migrated schema, dropped when the
// test ends.
func freshSchema(t testing.TB) string {
	t.Helper()
	pool := sharedPool.Get(t)
	schema := pgtest.Name("test_", 6)
	if _, err := Migrate(pgtest.Context(t), pool, schema); err != nil {
		t.Fatalf("Migrate(%s): %v", schema, err)
	}
	t.Cleanup(func() { dropSchema(t, schema) })
	return schema
}

func dropSchema(t testing.TB, schema string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// DROP SCHEMA … CASCADE locks the partitions and their parent in an
	// order of its own, so a query still winding down on the schema (a
	// cancelled subscription's page) can deadlock with it: try again.
	var err error
	for range 5 {
		if _, err = sharedPool.Get(t).Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err == nil || !isDeadlock(err) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("dropping schema %s: %v", schema, err)
	}
}

// newStore opens a Store on a fresh schema; it is closed, and the schema
// dropped, when the test ends.
func newStore(t testing.TB, opts Options) *Store {
	t.Helper()
	if opts.Schema == "" {
		opts.Schema = freshSchema(t)
	}
	s, err := Open(pgtest.Context(t), sharedPool.Get(t), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// isDeadlock reports whether err is PostgreSQL's SQLSTATE 40P01.
func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}
