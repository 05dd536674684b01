package sqlviews_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/postgres"
	"github.com/turnstile/turnstile/internal/pgtest"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/projections/sqlviews"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/node"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	code := m.Run()
	if shared.log != nil {
		_ = shared.log.Close()
		dropSchema(shared.logSchema)
	}
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

// sharedPool is the pool every test uses, opened on first use and closed
// by TestMain.
var sharedPool = pgtest.Pool{MaxConns: 20}

type sharedState struct {
	logOnce   sync.Once
	log       *postgres.Store
	logSchema string
	logErr    error
}

var shared sharedState

func dropSchema(schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _ = sharedPool.Opened().Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
}

// viewsSchema returns a new schema with the read model tables, dropped when
// the test ends.
func viewsSchema(t testing.TB) string {
	t.Helper()
	schema := pgtest.Name("views_", 5)
	if _, err := sqlviews.Migrate(pgtest.Context(t), sharedPool.Get(t), schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropSchema(schema) })
	return schema
}

// logStore returns a new, empty PostgreSQL log, closed and dropped when the
// test ends.
func logStore(t testing.TB) (*postgres.Store, string) {
	t.Helper()
	pool := sharedPool.Get(t)
	schema := pgtest.Name("log_", 5)
	if _, err := postgres.Migrate(pgtest.Context(t), pool, schema); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.Open(pgtest.Context(t), pool, postgres.Options{Schema: schema, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		dropSchema(schema)
	})
	return s, schema
}

// lifecycleLog returns a log with a whole lifecycle in it, made once per
// test binary by real executor and workers (services/node) on PostgreSQL:
// grants, completions, failures, rejections (queue full, on_limit reject),
// cancellations (waiting and running), timeouts, with_items parents and
// children, concurrency keys, pause and resume, a policy change. Tests only
// read it.
func lifecycleLog(t testing.TB) (*postgres.Store, string) {
	t.Helper()
	pool := sharedPool.Get(t)
	shared.logOnce.Do(func() {
		shared.logSchema = pgtest.Name("lifecycle_", 5)
		shared.log, shared.logErr = makeLifecycleLog(pool, shared.logSchema)
	})
	if shared.logErr != nil {
		t.Fatal(shared.logErr)
	}
	return shared.log, shared.logSchema
}

func quietLogger() *slog.Logger {
	if os.Getenv("TURNSTILE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func makeLifecycleLog(pool *pgxpool.Pool, schema string) (*postgres.Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := postgres.Migrate(ctx, pool, schema); err != nil {
		return nil, err
	}
	store, err := postgres.Open(ctx, pool, postgres.Options{Schema: schema, PollInterval: 50 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	if err := runLifecycle(ctx, store); err != nil {
		_ = store.Close()
		return nil, err
	}
	return store, nil
}

// runLifecycle drives a node on store through every kind of ending.
func runLifecycle(ctx context.Context, store eventstore.Store) error {
	n, err := node.Start(ctx, store, node.Config{Workers: 3, Slots: 4, Logger: quietLogger(), StopGrace: time.Second})
	if err != nil {
		return err
	}
	defer n.Stop()
	c := n.Commands
	for _, p := range []domain.Policy{
		{Ref: "t.noop", Runner: "core.noop", MaxConcurrent: 3},
		{Ref: "t.fail", Runner: "core.fail", MaxConcurrent: 2},
		{Ref: "t.sleep", Runner: "core.sleep", MaxConcurrent: 1, MaxQueueLength: 4},
		{Ref: "t.timeout", Runner: "core.sleep", MaxConcurrent: 2, TimeoutSeconds: 0.05},
		{Ref: "t.keyed", Runner: "core.echo", MaxConcurrent: 1, ConcurrencyKey: "customer"},
		{Ref: "t.reject", Runner: "core.sleep", MaxConcurrent: 1, OnLimit: "reject"},
		{Ref: "t.items", Runner: "core.echo", MaxConcurrent: 4},
	} {
		if _, err := c.DefineAction(ctx, p); err != nil {
			return fmt.Errorf("define %s: %w", p.Ref, err)
		}
	}
	var ids []string
	req := func(action string, input string, items ...string) (string, error) {
		r := command.Request{Action: action, Input: json.RawMessage(input)}
		for _, it := range items {
			r.WithItems = append(r.WithItems, json.RawMessage(it))
		}
		if len(items) > 0 {
			r.Concurrency = 3
		}
		id, _, err := c.Request(ctx, r)
		if err != nil {
			return "", fmt.Errorf("request %s: %w", action, err)
		}
		ids = append(ids, id)
		return id, nil
	}
	must := func(_ string, err error) error { return err }
	for i := range 40 {
		if err := must(req("t.noop", fmt.Sprintf(`{"i":%d,"note":"caf\u00e9 \"quoted\""}`, i))); err != nil {
			return err
		}
	}
	for i := range 8 {
		if err := must(req("t.fail", fmt.Sprintf(`{"message":"boom %d"}`, i))); err != nil {
			return err
		}
	}
	var sleeps []string
	for range 7 { // limit 1, queue 4: the last ones are rejected
		id, err := req("t.sleep", `{"seconds":0.3}`)
		if err != nil {
			return err
		}
		sleeps = append(sleeps, id)
	}
	for range 3 {
		if err := must(req("t.timeout", `{"seconds":5}`)); err != nil {
			return err
		}
	}
	for i := range 9 {
		if err := must(req("t.keyed", fmt.Sprintf(`{"customer":"c%d","n":%d}`, i%3, i))); err != nil {
			return err
		}
	}
	if err := must(req("t.keyed", `{"n":"no key"}`)); err != nil { // rejected: invalid_input
		return err
	}
	for range 4 {
		if err := must(req("t.reject", `{"seconds":0.2}`)); err != nil {
			return err
		}
	}
	if err := must(req("t.items", `{"base":true}`, `{"a":1}`, `{"a":2}`, `3`, `"four"`, `{"a":5}`, `{"a":6}`, `{"a":7}`)); err != nil {
		return err
	}
	cancelled, err := req("t.items", `{}`, `{"b":1}`, `{"b":2}`, `{"b":3}`, `{"b":4}`)
	if err != nil {
		return err
	}
	if _, err := c.Pause(ctx, "t.noop", "maintenance"); err != nil {
		return err
	}
	for i := range 5 {
		if err := must(req("t.noop", fmt.Sprintf(`{"after_pause":%d}`, i))); err != nil {
			return err
		}
	}
	if _, err := c.ChangePolicy(ctx, domain.Policy{Ref: "t.noop", Runner: "core.noop", MaxConcurrent: 5}); err != nil {
		return err
	}
	if _, err := c.Resume(ctx, "t.noop"); err != nil {
		return err
	}
	// Cancel one running sleep (the first is granted at once) and a waiter.
	time.Sleep(100 * time.Millisecond)
	for _, id := range []string{sleeps[0], sleeps[2], cancelled} {
		if err := c.RequestCancel(ctx, id, "test"); err != nil && !isEnded(err) {
			return fmt.Errorf("cancel %s: %w", id, err)
		}
	}
	// Wait until every execution has ended.
	v := projections.NewViews()
	for {
		if err := v.CatchUp(ctx, store); err != nil {
			return err
		}
		open := 0
		for _, id := range ids {
			x, ok := v.View(id)
			if !ok || !x.Status.Terminal() {
				open++
			}
		}
		if open == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d executions did not end: %w", open, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func isEnded(err error) bool { return err != nil && errors.Is(err, command.ErrAlreadyEnded) }
