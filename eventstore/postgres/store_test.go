package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/internal/pgtest"
	"github.com/turnstile/turnstile/internal/waitfor"
)

// TestConformance runs the shared conformance suite, every store on a fresh
// schema of the test database.
func TestConformance(t *testing.T) {
	pgtest.URL(t)
	storetest.Run(t, func(t *testing.T) eventstore.Store {
		return newStore(t, Options{})
	}, storetest.Capabilities{DensePositions: true, AtomicMultiStream: true})
}

// TestConformanceSmallPartitions runs the suite again on logs of partitions
// of 256 positions: the checks that write more (concurrency, subscriptions,
// large appends) then span many partitions (the unique constraints hold per
// partition only), and partitions are created as the head moves.
// TestTrimDropsPartitions trims across partitions of a few positions.
func TestConformanceSmallPartitions(t *testing.T) {
	pgtest.URL(t)
	storetest.Run(t, func(t *testing.T) eventstore.Store {
		schema := freshSchema(t)
		if err := SetPartitionSize(pgtest.Context(t), sharedPool.Get(t), schema, 256); err != nil {
			t.Fatal(err)
		}
		return newStore(t, Options{Schema: schema})
	}, storetest.Capabilities{DensePositions: true, AtomicMultiStream: true})
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		opts Options
		ok   bool
	}{
		{"zero", Options{}, true},
		{"all set", Options{Schema: "turnstile_prod2", MaxBatch: 10, PollInterval: 50 * time.Millisecond, CommitTimeout: time.Second}, true},
		{"schema upper case", Options{Schema: "Turnstile"}, false},
		{"schema with a dot", Options{Schema: "a.b"}, false},
		{"schema with a quote", Options{Schema: `a"b`}, false},
		{"schema starting with a digit", Options{Schema: "1abc"}, false},
		{"schema too long", Options{Schema: strings.Repeat("s", 60)}, false},
		{"negative MaxBatch", Options{MaxBatch: -1}, false},
		{"huge MaxBatch", Options{MaxBatch: 100_001}, false},
		{"PollInterval too short", Options{PollInterval: time.Millisecond}, false},
		{"PollInterval too long", Options{PollInterval: time.Hour}, false},
		{"CommitTimeout too short", Options{CommitTimeout: time.Millisecond}, false},
	} {
		if err := c.opts.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

func TestLoadMigrations(t *testing.T) {
	t.Parallel()
	ms := Migrations()
	if len(ms) == 0 || ms[0].Version != 1 || ms[0].Name != "log" || SchemaVersion() != ms[len(ms)-1].Version {
		t.Fatalf("Migrations() = %+v, SchemaVersion() = %d", ms, SchemaVersion())
	}
}

// TestMigrate: Migrate creates a schema Open accepts, does nothing the
// second time, and serialises concurrent callers so that exactly one applies
// the migrations; Open refuses a schema that is missing, behind or ahead.
func TestMigrate(t *testing.T) {
	t.Parallel()
	pool := sharedPool.Get(t)
	ctx := pgtest.Context(t)
	schema := "test_migrate_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	t.Cleanup(func() { dropSchema(t, schema) })

	_, err := Open(ctx, pool, Options{Schema: schema})
	if !errors.Is(err, ErrSchemaNotReady) || !strings.Contains(err.Error(), "run turnstile migrate") {
		t.Fatalf("Open on a missing schema: %v, want ErrSchemaNotReady saying to run turnstile migrate", err)
	}

	var wg sync.WaitGroup
	applied := make([][]Migration, 8)
	errs := make([]error, 8)
	for i := range applied {
		wg.Go(func() { applied[i], errs[i] = Migrate(ctx, pool, schema) })
	}
	wg.Wait()
	total := 0
	for i := range applied {
		if errs[i] != nil {
			t.Fatalf("concurrent Migrate %d: %v", i, errs[i])
		}
		total += len(applied[i])
	}
	if total != len(Migrations()) {
		t.Fatalf("8 concurrent Migrate calls applied %d migrations in all, want %d (each once)", total, len(Migrations()))
	}
	if again, err := Migrate(ctx, pool, schema); err != nil || len(again) != 0 {
		t.Fatalf("Migrate of a current schema: %v, %v; want nothing applied", again, err)
	}
	s, err := Open(ctx, pool, Options{Schema: schema})
	if err != nil {
		t.Fatalf("Open after Migrate: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	table := schema + ".schema_migrations"
	if _, err := pool.Exec(ctx, "INSERT INTO "+table+" (version, name) VALUES (999, 'future')"); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, pool, Options{Schema: schema}); !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("Open on a schema from a newer build: %v, want ErrSchemaTooNew", err)
	}
	if _, err := Migrate(ctx, pool, schema); !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("Migrate on a schema from a newer build: %v, want ErrSchemaTooNew", err)
	}
	if _, err := pool.Exec(ctx, "DELETE FROM "+table); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, pool, Options{Schema: schema}); !errors.Is(err, ErrSchemaNotReady) {
		t.Fatalf("Open on a schema whose migrations are not recorded: %v, want ErrSchemaNotReady", err)
	}
	if _, err := Migrate(ctx, pool, "Bad-Name"); err == nil {
		t.Fatal("Migrate accepted an invalid schema name")
	}
}

// withQuery returns the test database URL with a query parameter set.
func withQuery(t *testing.T, key, value string) string {
	t.Helper()
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestOpenURL: postgres:// and postgresql:// URLs, the schema parameter, and
// a store that owns its pool.
func TestOpenURL(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t)
	schema := "test_url_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	t.Cleanup(func() { dropSchema(t, schema) })
	raw := withQuery(t, "schema", schema)

	if _, err := OpenURL(ctx, raw, Options{}); !errors.Is(err, ErrSchemaNotReady) {
		t.Fatalf("OpenURL before MigrateURL: %v, want ErrSchemaNotReady", err)
	}
	if applied, err := MigrateURL(ctx, raw, ""); err != nil || len(applied) != len(Migrations()) {
		t.Fatalf("MigrateURL: %v, %v", applied, err)
	}
	s, err := OpenURL(ctx, "postgresql"+strings.TrimPrefix(raw, "postgres"), Options{})
	if err != nil {
		t.Fatalf("OpenURL(postgresql://…): %v", err)
	}
	if s.opts.Schema != schema {
		t.Fatalf("schema %q, want %q from the URL", s.opts.Schema, schema)
	}
	if _, err := s.Append(ctx, "execution-1", eventstore.NoStream, storetest.NewEvent("test.url", nil)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.pool.Ping(ctx); err == nil {
		t.Fatal("the pool OpenURL made is still open after Close")
	}
	// The same log through a pool of the test's own, and Open.
	s2 := newStore(t, Options{Schema: schema})
	if h, err := s2.Head(ctx); err != nil || h != 1 {
		t.Fatalf("Head = %d, %v; want 1", h, err)
	}

	for name, bad := range map[string]string{
		"scheme":           "mysql://u@localhost/db",
		"not a URL":        "postgres://u@local host:x/db",
		"schema conflict":  withQuery(t, "schema", "other"),
		"bad schema":       withQuery(t, "schema", "Bad"),
		"bad pool setting": withQuery(t, "pool_max_conns", "lots"),
	} {
		if s, err := OpenURL(ctx, bad, Options{Schema: schema}); err == nil {
			_ = s.Close()
			t.Errorf("OpenURL with a bad %s: no error", name)
		}
	}
}

// TestOutsideWriterUniqueViolation: writers that bypass the log_head lock
// (raw SQL) insert rows the store's own check cannot have seen: PostgreSQL's
// UNIQUE constraints (SQLSTATE 23505) refuse the store's conflicting insert.
// The store decides the append again under the lock, which sees the
// outsider's row; if the first attempt left the head it assumed unchecked
// (a head its own commit reached, see headsToCheck), a refusal there counts
// as a stale assumption and the store retries once more. The last refusal is
// final: the caller gets the wrong-version error, or the idempotency
// conflict for an id, and an append with Any raced fewer times simply lands
// after the outsiders' rows.
func TestOutsideWriterUniqueViolation(t *testing.T) {
	t.Parallel()
	s := newStore(t, Options{})
	ctx := pgtest.Context(t)
	type row struct {
		stream  string
		version int
		id      uuid.UUID
	}
	outsider := storetest.NewEvent("test.outsider", nil)
	for _, c := range []struct {
		name     string
		stream   string
		expected eventstore.ExpectedVersion
		event    domain.Envelope
		rows     []row // inserted by outside transactions, committed in turn once the store waits for each
		check    func(eventstore.AppendResult, error)
	}{
		{"Exact", "execution-a", eventstore.Exact(0), storetest.NewEvent("test.mine", nil), []row{{"execution-a", 1, uuid.New()}}, func(_ eventstore.AppendResult, err error) {
			var wv *eventstore.WrongVersionError
			if !errors.As(err, &wv) || !wv.Exists || wv.Actual != 1 {
				t.Errorf("Exact(0) after an outsider took version 1: %v, want a WrongVersionError at version 1", err)
			}
		}},
		{"Any", "execution-b", eventstore.Any, storetest.NewEvent("test.mine", nil), []row{{"execution-b", 1, uuid.New()}}, func(res eventstore.AppendResult, err error) {
			if err != nil || res.Version != 2 {
				t.Errorf("Any after an outsider took version 1: %+v, %v; want version 2", res, err)
			}
		}},
		{"AnyTwice", "execution-c", eventstore.Any, storetest.NewEvent("test.mine", nil), []row{{"execution-c", 1, uuid.New()}, {"execution-c", 2, uuid.New()}}, func(res eventstore.AppendResult, err error) {
			if err != nil || res.Version != 3 {
				t.Errorf("Any raced twice by outsiders, its first head unchecked: %+v, %v; want version 3", res, err)
			}
		}},
		{"AnyThrice", "execution-e", eventstore.Any, storetest.NewEvent("test.mine", nil), []row{{"execution-e", 1, uuid.New()}, {"execution-e", 2, uuid.New()}, {"execution-e", 3, uuid.New()}}, func(_ eventstore.AppendResult, err error) {
			var wv *eventstore.WrongVersionError
			if !errors.As(err, &wv) || !wv.Exists || wv.Actual != 3 || wv.Stream != "execution-e" {
				t.Errorf("Any raced three times by outsiders: %v, want a WrongVersionError at version 3", err)
			}
		}},
		{"id", "execution-d", eventstore.Any, outsider, []row{{"execution-elsewhere", 0, outsider.ID}}, func(_ eventstore.AppendResult, err error) {
			if !errors.Is(err, eventstore.ErrIdempotencyConflict) {
				t.Errorf("an id an outsider stored in another stream: %v, want ErrIdempotencyConflict", err)
			}
		}},
	} {
		mustAppendT(t, s, c.stream, eventstore.NoStream, storetest.NewEvent("test.first", nil))
		type outside struct {
			x   *rawTx
			xid string
		}
		var outs []outside
		for i, r := range c.rows {
			x := beginRawT(t, ctx)
			var xid string
			if err := x.conn.QueryRow(ctx, "SELECT xid(pg_current_xact_id())::text").Scan(&xid); err != nil {
				t.Fatal(err)
			}
			_, err := x.conn.Exec(ctx, `INSERT INTO `+s.opts.Schema+`.events (position, stream, version, id, type, schema_version, committed_at, owner, correlation_id, causation_id, writer, hash)
				VALUES ($1, $2, $3, $4, 'test.outsider', 1, now(), 'api', '', '', '', decode(repeat('00', 32), 'hex'))`, int64(900_000)+int64(len(outs)+10*len(c.name)+i) /* in the first partition, far from the store's positions */, r.stream, r.version, r.id)
			if err != nil {
				t.Fatal(err)
			}
			outs = append(outs, outside{x, xid})
		}
		type answer struct {
			res eventstore.AppendResult
			err error
		}
		done := make(chan answer, 1)
		go func() {
			res, err := s.Append(ctx, c.stream, c.expected, c.event)
			done <- answer{res, err}
		}()
		for _, o := range outs {
			// Wait until the store's insert waits for this outsider.
			waitfor.That(t, "the store's insert to wait for the outsider", func() bool {
				var n int
				if err := sharedPool.Get(t).QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND transactionid::text = $1 AND NOT granted", o.xid).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n > 0
			})
			if err := o.x.end(ctx, true); err != nil {
				t.Fatal(err)
			}
		}
		a := <-done
		c.check(a.res, a.err)
	}
}

func mustAppendT(t *testing.T, s eventstore.Store, stream string, expected eventstore.ExpectedVersion, evs ...domain.Envelope) eventstore.AppendResult {
	t.Helper()
	res, err := s.Append(pgtest.Context(t), stream, expected, evs...)
	if err != nil {
		t.Fatalf("Append(%q): %v", stream, err)
	}
	return res
}

// TestNotifyAcrossStores: with polling out of the way (one minute), a
// subscription on one Store sees what another Store on the same schema (a
// process of its own, as far as PostgreSQL can tell) commits, promptly: the
// NOTIFY sent in the append transaction wakes it. After its listening
// connection is killed, it reconnects and is woken again.
func TestNotifyAcrossStores(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t)
	reader := newStore(t, Options{Schema: schema, PollInterval: time.Minute})
	writer := newStore(t, Options{Schema: schema})
	ctx := pgtest.Context(t)
	got := make(chan domain.Envelope, 10)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_ = reader.Subscribe(sctx, 0, eventstore.Filter{}, func(batch []domain.Envelope) error {
			for _, e := range batch {
				got <- e
			}
			return nil
		})
	}()
	listening := func() int {
		var pid int
		waitfor.That(t, "the reader's store to LISTEN", func() bool {
			return sharedPool.Get(t).QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE query = $1", reader.sql.listen).Scan(&pid) == nil
		})
		return pid
	}
	expect := func(what string) {
		t.Helper()
		e := storetest.NewEvent("test.notify", nil)
		mustAppendT(t, writer, "execution-n", eventstore.Any, e)
		select {
		case d := <-got:
			if d.ID != e.ID {
				t.Fatalf("%s: delivered %s, want %s", what, d.ID, e.ID)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: a commit by another store was not delivered within 10s (poll interval 1m): no notification", what)
		}
	}
	pid := listening()
	expect("first append")
	var ok bool
	if err := sharedPool.Get(t).QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d): %v, %v", pid, ok, err)
	}
	waitfor.That(t, "the reader's store to LISTEN on a new connection", func() bool { return listening() != pid })
	expect("after the listening connection was killed")
}

// TestGroupCommit: concurrent appends share transactions.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	s := newStore(t, Options{})
	ctx := pgtest.Context(t)
	const writers, each = 16, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if _, err := s.Append(ctx, fmt.Sprintf("execution-%d", w), eventstore.Any, storetest.NewEvent("test.g", i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if g := s.groups.Load(); g >= writers*each {
		t.Fatalf("%d appends took %d transactions; group commit should share them", writers*each, g)
	} else {
		t.Logf("%d appends in %d transactions", writers*each, g)
	}
}

// TestAppendCancelled: an append whose context is already over writes
// nothing.
func TestAppendCancelled(t *testing.T) {
	t.Parallel()
	s := newStore(t, Options{})
	ctx, cancel := context.WithCancel(pgtest.Context(t))
	cancel()
	if _, err := s.Append(ctx, "execution-c", eventstore.Any, storetest.NewEvent("test.c", nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append with a cancelled context: %v", err)
	}
	if h, err := s.Head(pgtest.Context(t)); err != nil || h != 0 {
		t.Fatalf("Head = %d, %v; want 0", h, err)
	}
}

// TestFastCommitStaleHeads: a Store decides a group on the heads it assumes
// (the caller's expected version, or what its own commits left), and the
// append statement checks them under the lock. When another Store on the
// same schema (another process) moved a stream meanwhile, the assumption is
// stale: nothing is written and the group is decided again under the lock,
// so every caller gets what a lone append would have got.
func TestFastCommitStaleHeads(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t)
	a, b := newStore(t, Options{Schema: schema}), newStore(t, Options{Schema: schema})
	ctx := pgtest.Context(t)
	e0, e1 := storetest.NewEvent("test.a0", nil), storetest.NewEvent("test.b1", nil)
	mustAppendT(t, a, "execution-s", eventstore.NoStream, e0) // a remembers version 0
	r1 := mustAppendT(t, b, "execution-s", eventstore.Exact(0), e1)

	slow := a.slow.Load()
	// Any: a assumes version 0 (its own last commit); the log is at 1.
	res, err := a.Append(ctx, "execution-s", eventstore.Any, storetest.NewEvent("test.a2", nil))
	if err != nil || res.Version != 2 {
		t.Fatalf("Any after another store's append: %+v, %v; want version 2", res, err)
	}
	if a.slow.Load() == slow {
		t.Fatal("the stale assumption was not caught: no careful commit")
	}
	// A stale caller: Exact(1) fails with the log's version, not a's guess.
	var wv *eventstore.WrongVersionError
	if _, err := a.Append(ctx, "execution-s", eventstore.Exact(1), storetest.NewEvent("test.a3", nil)); !errors.As(err, &wv) || wv.Actual != 2 {
		t.Fatalf("Exact(1) at version 2: %v, want a WrongVersionError at 2", err)
	}
	// A re-append of b's event through a: the original result.
	if res, err := a.Append(ctx, "execution-s", eventstore.Exact(0), e1); err != nil || res != r1 {
		t.Fatalf("re-append of another store's event: %+v, %v; want %+v", res, err, r1)
	}
	// And a's next appends are decided in one round trip again.
	slow = a.slow.Load()
	for i := range 5 {
		if _, err := a.Append(ctx, "execution-s", eventstore.Exact(uint64(2+i)), storetest.NewEvent("test.a", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := a.slow.Load() - slow; n != 0 {
		t.Fatalf("%d careful commits for appends whose expected versions held", n)
	}
	evs, err := b.ReadStream(ctx, "execution-s", 0, 100)
	if err != nil || len(evs) != 8 {
		t.Fatalf("stream holds %d events (%v), want 8", len(evs), err)
	}
	for i, e := range evs {
		if e.Version != uint64(i) {
			t.Fatalf("event %d at version %d", i, e.Version)
		}
	}
}
