// Package pgtest is what the PostgreSQL tests of several packages share:
// the database URL (a skip without one, a failure in CI), a connection pool
// opened once per test binary, a deadline for a test's context and random
// schema names. It imports only the standard library and pgx, so that tests
// at any layer may use it; only _test.go files import it.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// URLEnv names the database the tests use. scripts/with-postgres.sh sets it
// to a throwaway cluster it starts.
const URLEnv = "TURNSTILE_POSTGRES_URL"

// URL returns the database URL. Without one it skips the test, or fails it
// when CI=true: in CI the PostgreSQL tests must never be skipped silently.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(URLEnv)
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set and CI=true: the PostgreSQL tests must run in CI; run them through scripts/with-postgres.sh", URLEnv)
		}
		t.Skipf("%s not set: run the tests through scripts/with-postgres.sh (it starts a throwaway PostgreSQL), or set it to postgres://user:pass@host:port/db", URLEnv)
	}
	return u
}

// Pool is a connection pool shared by a test binary's tests: Get opens it
// on first use, TestMain closes it. The zero Pool is ready to use.
type Pool struct {
	// MaxConns caps the pool's connections; 0 keeps pgx's default.
	MaxConns int32

	once sync.Once
	pool *pgxpool.Pool
	err  error
}

// Get returns the pool, opening it on the first call; it skips the test
// without a database (see URL) and fails it if the pool cannot be opened.
func (p *Pool) Get(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := URL(t)
	p.once.Do(func() {
		cfg, err := pgxpool.ParseConfig(u)
		if err != nil {
			p.err = err
			return
		}
		if p.MaxConns > 0 {
			cfg.MaxConns = p.MaxConns
		}
		p.pool, p.err = pgxpool.NewWithConfig(context.Background(), cfg)
	})
	if p.err != nil {
		t.Fatalf("connecting to %s: %v", URLEnv, p.err)
	}
	return p.pool
}

// Opened returns the pool if Get has opened it, else nil: for TestMain's
// clean-up, which has no test to skip.
func (p *Pool) Opened() *pgxpool.Pool { return p.pool }

// Close closes the pool if it was opened. Closing waits for every
// connection to be released: if that takes longer than wait, Close returns
// an error (a test left connections acquired) and lets the closing go on in
// the background.
func (p *Pool) Close(wait time.Duration) error {
	if p.pool == nil {
		return nil
	}
	closed := make(chan struct{})
	go func() {
		p.pool.Close()
		close(closed)
	}()
	select {
	case <-closed:
		return nil
	case <-time.After(wait):
		return fmt.Errorf("a test left connections of the shared pool acquired (not released after %s)", wait)
	}
}

// Context returns a context that ends after five minutes or when the test
// ends, whichever comes first.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Name returns prefix followed by n random bytes in hex: a schema name no
// other test uses.
func Name(prefix string, n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
