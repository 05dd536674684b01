package pgtest

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/turnstile/turnstile/internal/waitfor"
)

// TestURLSkipsWithoutDatabase: with no URL and CI unset, URL skips the test.
func TestURLSkipsWithoutDatabase(t *testing.T) {
	t.Setenv(URLEnv, "")
	t.Setenv("CI", "")
	var inner *testing.T
	t.Run("no-url", func(t *testing.T) {
		inner = t
		URL(t)
		t.Error("URL returned without a database")
	})
	if !inner.Skipped() {
		t.Error("the test without a database was not skipped")
	}
}

// TestName: the prefix, then n random bytes in hex, different every call.
func TestName(t *testing.T) {
	a, b := Name("log_", 5), Name("log_", 5)
	if !regexp.MustCompile(`^log_[0-9a-f]{10}$`).MatchString(a) {
		t.Errorf("Name = %q, want log_ and 10 hex digits", a)
	}
	if a == b {
		t.Errorf("two names are both %q", a)
	}
}

// TestContextEndsWithTheTest: the context has a deadline and is cancelled
// when the test that asked for it ends.
func TestContextEndsWithTheTest(t *testing.T) {
	var ctx context.Context
	t.Run("inner", func(t *testing.T) {
		ctx = Context(t)
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > 5*time.Minute {
			t.Errorf("deadline %v (set: %v), want within five minutes", d, ok)
		}
		if ctx.Err() != nil {
			t.Fatalf("the context ended during the test: %v", ctx.Err())
		}
	})
	if ctx.Err() == nil {
		t.Error("the context outlived its test")
	}
}

// TestPool: Get opens one pool with the cap asked for and returns it on
// every call; Close reports connections a test left acquired, and closes
// once they are released.
func TestPool(t *testing.T) {
	URL(t) // skips without a database
	var p Pool
	p.MaxConns = 3
	if p.Opened() != nil {
		t.Fatal("a pool is open before Get")
	}
	if err := p.Close(time.Second); err != nil {
		t.Fatalf("Close of a pool never opened: %v", err)
	}
	pool := p.Get(t)
	if pool != p.Get(t) || pool != p.Opened() {
		t.Fatal("Get opened a second pool")
	}
	if got := pool.Config().MaxConns; got != 3 {
		t.Errorf("MaxConns = %d, want 3", got)
	}
	ctx := Context(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
	if err := p.Close(200 * time.Millisecond); err == nil {
		t.Error("Close reported nothing with a connection still acquired")
	}
	conn.Release()
	waitfor.That(t, "the pool to close its connections after the last was released", func() bool { return pool.Stat().TotalConns() == 0 },
		waitfor.Note(func() string { return fmt.Sprintf("it holds %d", pool.Stat().TotalConns()) }))
}
