package lease_test

import (
	"context"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/turnstile/turnstile/internal/waitfor"
	"github.com/turnstile/turnstile/services/lease"
)

// pgConfig returns the test database's connection configuration, skips the
// test without one, or fails it in CI (see eventstore/postgres).
func pgConfig(t *testing.T) *pgx.ConnConfig {
	t.Helper()
	u := os.Getenv("TURNSTILE_POSTGRES_URL")
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TURNSTILE_POSTGRES_URL is not set and CI=true: the PostgreSQL tests must run in CI; run them through scripts/with-postgres.sh")
		}
		t.Skip("TURNSTILE_POSTGRES_URL not set: run `scripts/with-postgres.sh go test ./services/lease/` (starts a throwaway PostgreSQL)")
	}
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestPostgresLeaseOneHolder: one holder at a time; a waiter gets the lease
// when the holder releases it, and when the holder's session is killed by
// the server (as when its process dies), and the killed holder learns it
// lost the lease.
func TestPostgresLeaseOneHolder(t *testing.T) {
	cfg := pgConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "test " + uuid.NewString()
	l := &lease.Postgres{Conn: cfg, Name: name, CheckEvery: 50 * time.Millisecond, Logger: quiet()}

	first, err := l.Acquire(ctx, func() { t.Error("the first contender waited for a free lease") })
	if err != nil {
		t.Fatal(err)
	}
	var waited atomic.Bool
	second := make(chan lease.Held, 1)
	go func() {
		h, err := l.Acquire(ctx, func() { waited.Store(true) })
		if err != nil {
			t.Error(err)
			close(second)
			return
		}
		second <- h
	}()
	select {
	case <-second:
		t.Fatal("a second holder got the lease while the first held it")
	case <-time.After(300 * time.Millisecond):
	}
	if !waited.Load() {
		t.Fatal("the second contender did not report waiting")
	}
	first.Release()
	var h2 lease.Held
	select {
	case h2 = <-second:
	case <-ctx.Done():
		t.Fatal("the second contender never got the released lease")
	}
	if h2 == nil {
		t.FailNow()
	}

	// A third waits; the server kills the holder's session.
	third := make(chan lease.Held, 1)
	go func() {
		h, err := l.Acquire(ctx, nil)
		if err != nil {
			t.Error(err)
			close(third)
			return
		}
		third <- h
	}()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	// The holder's backend is the one holding the advisory lock with our key
	// (granted): classid/objid are the key's two halves; the third's is the
	// one waiting for it (not granted).
	key := uint64(lease.Key(name))
	waitfor.That(t, "the third to wait for the lease", func() bool {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND classid::bigint = $1 AND objid::bigint = $2`, int64(key>>32), int64(key&0xffffffff)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	tag, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND classid::bigint = $1 AND objid::bigint = $2`, int64(key>>32), int64(key&0xffffffff))
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("found %d holders of the lease, want 1", tag.RowsAffected())
	}
	select {
	case <-h2.Lost():
	case <-ctx.Done():
		t.Fatal("the killed holder never learned that it lost the lease")
	}
	h2.Release()
	var h3 lease.Held
	select {
	case h3 = <-third:
	case <-ctx.Done():
		t.Fatal("the waiter never got the lease of the killed holder")
	}
	if h3 == nil {
		t.FailNow()
	}
	h3.Release()
}

// TestFollowTakesOver: two processes follow one lease; exactly one is active
// at a time, and when the active one stops the other becomes active.
func TestFollowTakesOver(t *testing.T) {
	cfg := pgConfig(t)
	name := "test " + uuid.NewString()
	var active atomic.Int32
	var bothAtOnce atomic.Bool
	start := func(id int) (stop func(), isActive *atomic.Bool) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		isActive = &atomic.Bool{}
		go func() {
			defer close(done)
			lease.Follow(ctx, &lease.Postgres{Conn: cfg, Name: name, CheckEvery: 50 * time.Millisecond}, quiet().With("id", id), func(a bool) {
				if a {
					if active.Add(1) > 1 {
						bothAtOnce.Store(true)
					}
				} else {
					active.Add(-1)
				}
				isActive.Store(a)
			})
		}()
		return func() { cancel(); <-done }, isActive
	}
	stopA, a := start(1)
	waitfor.That(t, "the first follower becomes active", a.Load)
	stopB, b := start(2)
	time.Sleep(200 * time.Millisecond)
	if b.Load() {
		t.Fatal("the second follower is active while the first is")
	}
	stopA()
	waitfor.That(t, "the second follower takes over", b.Load)
	stopB()
	if bothAtOnce.Load() {
		t.Fatal("both followers were active at once")
	}
	if n := active.Load(); n != 0 {
		t.Fatalf("%d followers still active after both stopped", n)
	}
}
