package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

// urlEnv names the database the tests use. scripts/with-postgres.sh sets it
// to a throwaway cluster it starts.
const urlEnv = "TURNSTILE_POSTGRES_URL"

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv(urlEnv) == "" && os.Getenv("CI") != "true" {
		// Tests skip without a database, but examples cannot: leave them
		// out unless asked for by name.
		if f := flag.Lookup("test.run"); f != nil && f.Value.String() == "" {
			_ = flag.Set("test.run", "^Test")
		}
	}
	code := m.Run()
	dropBenchLog()
	closed := make(chan struct{})
	go func() {
		shared.close() // waits for every connection to be released
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		fmt.Fprintln(os.Stderr, "a test left connections of the shared pool acquired")
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

// testURL returns the database URL, skips the test if there is none, or
// fails it in CI, where PostgreSQL must never be skipped silently.
func testURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(urlEnv)
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set and CI=true: the PostgreSQL tests must run in CI; run them through scripts/with-postgres.sh", urlEnv)
		}
		t.Skipf("%s not set: run `scripts/with-postgres.sh go test ./eventstore/postgres/` (starts a throwaway PostgreSQL), or set it to postgres://user:pass@host:port/db", urlEnv)
	}
	return u
}

// sharedPool is the pool every test uses, opened on first use and closed by
// TestMain.
type sharedPool struct {
	once sync.Once
	pool *pgxpool.Pool
	err  error
}

var shared sharedPool

func (s *sharedPool) close() {
	if s.pool != nil {
		s.pool.Close()
	}
}

func testPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := testURL(t)
	shared.once.Do(func() {
		cfg, err := pgxpool.ParseConfig(u)
		if err != nil {
			shared.err = err
			return
		}
		cfg.MaxConns = 40
		shared.pool, shared.err = pgxpool.NewWithConfig(context.Background(), cfg)
	})
	if shared.err != nil {
		t.Fatalf("connecting to %s: %v", urlEnv, shared.err)
	}
	return shared.pool
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// freshSchema returns the name of a new, migrated schema, dropped when the
// test ends.
func freshSchema(t testing.TB) string {
	t.Helper()
	pool := testPool(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "test_" + hex.EncodeToString(b)
	if _, err := Migrate(ctxT(t), pool, schema); err != nil {
		t.Fatalf("Migrate(%s): %v", schema, err)
	}
	t.Cleanup(func() { dropSchema(t, schema) })
	return schema
}

func dropSchema(t testing.TB, schema string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := testPool(t).Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
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
	s, err := Open(ctxT(t), testPool(t), opts)
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
