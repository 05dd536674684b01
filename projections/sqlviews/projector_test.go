package sqlviews_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/internal/pgtest"
	"github.com/turnstile/turnstile/internal/waitfor"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/projections/sqlviews"
	"github.com/turnstile/turnstile/services/command"
)

// runProjector runs p in the background until the test ends (or stop is
// called) and returns stop, which waits for Run and returns its error.
func runProjector(t *testing.T, p *sqlviews.Projector) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once bool
	var err error
	stop = func() error {
		if !once {
			once = true
			cancel()
			err = <-done
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func newProjector(t *testing.T, store eventstore.Store, opts sqlviews.Options) *sqlviews.Projector {
	t.Helper()
	p, err := sqlviews.New(pgtest.Context(t), sharedPool.Get(t), store, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func head(t *testing.T, store eventstore.Store) uint64 {
	t.Helper()
	h, err := store.Head(pgtest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// mustEqualRebuild checks the tables against a rebuild from position 0 and
// returns the report.
func mustEqualRebuild(t *testing.T, store eventstore.Store, schema string) sqlviews.Report {
	t.Helper()
	rep, err := sqlviews.Check(pgtest.Context(t), sharedPool.Get(t), store, sqlviews.Options{Schema: schema}, 10)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if !rep.Equal() {
		t.Fatalf("the tables differ from a rebuild at position %d:\n%s", rep.Position, strings.Join(rep.Differences, "\n"))
	}
	return rep
}

func TestMigrations(t *testing.T) {
	ctx, pool := pgtest.Context(t), sharedPool.Get(t)
	schema := pgtest.Name("views_", 5)
	t.Cleanup(func() { dropSchema(schema) })
	store := memstore.New(memstore.Options{})
	defer store.Close()
	if _, err := sqlviews.New(ctx, pool, store, sqlviews.Options{Schema: schema}); !errors.Is(err, sqlviews.ErrSchemaNotReady) {
		t.Fatalf("New before Migrate: %v, want ErrSchemaNotReady", err)
	}
	applied, err := sqlviews.Migrate(ctx, pool, schema)
	if err != nil || len(applied) != sqlviews.SchemaVersion() {
		t.Fatalf("Migrate: %v, %v; want all %d migrations", applied, err, sqlviews.SchemaVersion())
	}
	if again, err := sqlviews.Migrate(ctx, pool, schema); err != nil || len(again) != 0 {
		t.Fatalf("second Migrate: %v, %v; want nothing to do", again, err)
	}
	if _, err := sqlviews.New(ctx, pool, store, sqlviews.Options{Schema: schema}); err != nil {
		t.Fatalf("New after Migrate: %v", err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+schema+".read_model_migrations (version, name) VALUES (999, 'future')"); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlviews.New(ctx, pool, store, sqlviews.Options{Schema: schema}); !errors.Is(err, sqlviews.ErrSchemaTooNew) {
		t.Fatalf("New on newer tables: %v, want ErrSchemaTooNew", err)
	}
	if _, err := sqlviews.Migrate(ctx, pool, "Bad-Name"); err == nil {
		t.Fatal("Migrate accepted an invalid schema name")
	}
	if err := (sqlviews.Options{MaxBatch: -1, Name: "BAD NAME"}).Validate(); err == nil || !strings.Contains(err.Error(), "MaxBatch") || !strings.Contains(err.Error(), "name") {
		t.Fatalf("Validate: %v, want both fields reported", err)
	}
}

// TestLiveEqualsRebuild follows a realistic log in small transactions and
// compares the tables with a rebuild from position 0 into a scratch schema;
// a changed and a missing row are then reported.
func TestLiveEqualsRebuild(t *testing.T) {
	store, _ := lifecycleLog(t)
	schema := viewsSchema(t)
	ctx, pool := pgtest.Context(t), sharedPool.Get(t)
	p := newProjector(t, store, sqlviews.Options{Schema: schema, MaxBatch: 7, Logger: quietLogger()})
	stop := runProjector(t, p)
	h := head(t, store)
	if err := sqlviews.WaitFor(ctx, pool, sqlviews.Options{Schema: schema}, h); err != nil {
		t.Fatal(err)
	}
	if !p.Active() {
		t.Error("the running projector does not report itself active")
	}
	if lag, cp, err := p.Lag(ctx); err != nil || lag != 0 || cp != h {
		t.Errorf("Lag: %d, checkpoint %d, %v; want 0 at %d", lag, cp, err, h)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.Collector())
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gauges := map[string]float64{}
	for _, f := range families {
		gauges[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
	}
	if want := map[string]float64{"turnstile_sql_views_position": float64(h), "turnstile_sql_views_lag_events": 0,
		"turnstile_sql_views_active": 1}; !reflect.DeepEqual(gauges, want) {
		t.Errorf("metrics %v, want %v", gauges, want)
	}
	// A second projector on the same tables neither writes nor waits.
	other := newProjector(t, store, sqlviews.Options{Schema: schema})
	if err := other.CatchUpTo(ctx, h); !errors.Is(err, sqlviews.ErrBusy) {
		t.Errorf("CatchUpTo while another projector runs: %v, want ErrBusy", err)
	}
	rep := mustEqualRebuild(t, store, schema)
	if rep.Position != h {
		t.Errorf("checked at position %d, want the head %d", rep.Position, h)
	}
	want := projections.NewViews()
	if err := want.CatchUpTo(ctx, store, h); err != nil {
		t.Fatal(err)
	}
	all, _ := want.ExecutionsSince(0, "", 1<<30)
	if rep.Executions != len(all) || rep.QueueStats != len(want.AllStats()) {
		t.Errorf("rows: %d executions, %d queue_stats; the log has %d and %d", rep.Executions, rep.QueueStats, len(all), len(want.AllStats()))
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// The comparison is not vacuous: damage two rows.
	var victim string
	if err := pool.QueryRow(ctx, "UPDATE "+schema+".executions SET status = 'running' WHERE id = (SELECT min(id) FROM "+schema+".executions) RETURNING id").Scan(&victim); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "DELETE FROM "+schema+".queue_stats WHERE action = 't.fail'"); err != nil {
		t.Fatal(err)
	}
	bad, err := sqlviews.Check(ctx, pool, store, sqlviews.Options{Schema: schema}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad.Differences) != 2 || !strings.Contains(bad.Differences[0], "execution "+victim+": live") ||
		!strings.Contains(bad.Differences[1], "queue_stats t.fail: missing from the live table") {
		t.Fatalf("differences after damaging two rows:\n%s", strings.Join(bad.Differences, "\n"))
	}
}

// TestRowsEqualTheAPI checks every row against what the API serves
// (projections.Views) for the same log position, field by field.
func TestRowsEqualTheAPI(t *testing.T) {
	store, _ := lifecycleLog(t)
	rowsEqualTheAPI(t, store)
}

// rowsEqualTheAPI folds store's lifecycle log into fresh tables and checks
// every row against projections.Views at the same position.
func rowsEqualTheAPI(t *testing.T, store eventstore.Store) {
	t.Helper()
	schema := viewsSchema(t)
	ctx, pool := pgtest.Context(t), sharedPool.Get(t)
	h := head(t, store)
	if err := newProjector(t, store, sqlviews.Options{Schema: schema, MaxBatch: 100}).CatchUpTo(ctx, h); err != nil {
		t.Fatal(err)
	}
	views := projections.NewViews()
	if err := views.CatchUpTo(ctx, store, h); err != nil {
		t.Fatal(err)
	}

	rows, err := pool.Query(ctx, `SELECT id, action, status, concurrency_key, parent, item_index, items, concurrency, children,
		children_requested, worker, attempt, cancel_requested, input::text, result::text, error, code,
		requested_at, scheduling_at, scheduled_at, running_at, ended_at, version, requested_position, position
		FROM `+schema+`.executions ORDER BY requested_position`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]projections.ExecutionView{}
	var order []string
	for rows.Next() {
		var x projections.ExecutionView
		var key, parent, worker, input, result, errMsg, code *string
		var itemIndex, items, concurrency, asked *int32
		var reqPos *int64
		var pos int64
		var children []string
		if err := rows.Scan(&x.ID, &x.Action, &x.Status, &key, &parent, &itemIndex, &items, &concurrency, &children,
			&asked, &worker, &x.Attempt, &x.CancelAsked, &input, &result, &errMsg, &code,
			&x.RequestedAt, &x.SchedulingAt, &x.ScheduledAt, &x.RunningAt, &x.EndedAt, &x.Version, &reqPos, &pos); err != nil {
			t.Fatal(err)
		}
		deref := func(s *string) string {
			if s == nil {
				return ""
			}
			return *s
		}
		num := func(n *int32) int {
			if n == nil {
				return 0
			}
			return int(*n)
		}
		x.ConcurrencyKey, x.Parent, x.Worker, x.Error, x.Code = deref(key), deref(parent), deref(worker), deref(errMsg), deref(code)
		x.ItemIndex, x.Items, x.Concurrency, x.ChildrenAsked = num(itemIndex), num(items), num(concurrency), num(asked)
		x.Children = children
		if input != nil {
			x.Input = json.RawMessage(*input)
		}
		if result != nil {
			x.Result = json.RawMessage(*result)
		}
		x.Position = uint64(pos)
		if reqPos == nil {
			t.Errorf("execution %s has no requested_position", x.ID)
		}
		got[x.ID] = x
		order = append(order, x.ID)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// requested_position orders the rows as the API lists them (newest first).
	var listed []string
	for after := ""; ; {
		page, next, err := views.List(projections.ListFilter{After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range page {
			listed = append([]string{x.ID}, listed...)
		}
		if next == "" {
			break
		}
		after = next
	}
	if !reflect.DeepEqual(order, listed) {
		t.Errorf("rows by requested_position:\n%v\nthe API's list, oldest first:\n%v", order, listed)
	}
	kinds := map[domain.Status]int{}
	for _, id := range listed {
		want, _ := views.View(id)
		kinds[want.Status]++
		g := got[id]
		if !sameJSON(g.Input, want.Input) || !sameJSON(g.Result, want.Result) {
			t.Errorf("execution %s: input/result %s %s, the API's %s %s", id, g.Input, g.Result, want.Input, want.Result)
		}
		g.Input, g.Result, want.Input, want.Result = nil, nil, nil, nil
		gj, _ := json.Marshal(g)
		wj, _ := json.Marshal(want)
		if string(gj) != string(wj) {
			t.Errorf("execution %s:\nrow %s\nAPI %s", id, gj, wj)
		}
	}
	for _, st := range []domain.Status{domain.StatusCompleted, domain.StatusFailed, domain.StatusTimedOut, domain.StatusCancelled, domain.StatusRejected} {
		if kinds[st] == 0 {
			t.Errorf("the lifecycle log has no %s execution: %v", st, kinds)
		}
	}

	var statsJSON []byte
	if err := pool.QueryRow(ctx, `SELECT coalesce(json_agg(s ORDER BY action), '[]') FROM `+schema+`.queue_stats s`).Scan(&statsJSON); err != nil {
		t.Fatal(err)
	}
	var gotStats []projections.QueueStats
	if err := json.Unmarshal(statsJSON, &gotStats); err != nil {
		t.Fatal(err)
	}
	wantStats := views.AllStats()
	for i := range gotStats { // PostgreSQL writes times with its own zone offset
		if ts := gotStats[i].OldestEnqueuedAt; ts != nil {
			u := ts.UTC()
			gotStats[i].OldestEnqueuedAt = &u
		}
	}
	gj, _ := json.Marshal(gotStats)
	wj, _ := json.Marshal(wantStats)
	if string(gj) != string(wj) {
		t.Errorf("queue_stats:\nrows %s\nAPI  %s", gj, wj)
	}
	if !strings.Contains(string(wj), `"wait_p95_ms"`) || len(wantStats) != 7 {
		t.Errorf("the API's stats: %s", wj)
	}
}

func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// TestFailureBeforeCommitLosesNothing makes transactions fail after their
// rows and checkpoint are written and before they commit: with an error, and
// with the context cancelled. Each time the tables stay at the last
// committed checkpoint, equal to a rebuild there, and the next run resumes
// from that checkpoint.
func TestFailureBeforeCommitLosesNothing(t *testing.T) {
	store, _ := lifecycleLog(t)
	schema := viewsSchema(t)
	ctx, pool := pgtest.Context(t), sharedPool.Get(t)
	opts := sqlviews.Options{Schema: schema, MaxBatch: 25, Logger: quietLogger()}
	h := head(t, store)

	// 1. The third transaction fails.
	p := newProjector(t, store, opts)
	boom := errors.New("injected failure")
	var commits []uint64
	sqlviews.SetBeforeCommit(p, func(_ context.Context, next uint64) error {
		if len(commits) == 2 {
			return boom
		}
		commits = append(commits, next)
		return nil
	})
	err := p.Run(ctx)
	if !errors.Is(err, boom) {
		t.Fatalf("Run: %v, want the injected failure", err)
	}
	cp, err := sqlviews.Checkpoint(ctx, pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if cp != commits[1] || cp == 0 || cp >= h {
		t.Fatalf("checkpoint %d after the failure; committed %v, head %d", cp, commits, h)
	}
	rep := mustEqualRebuild(t, store, schema)
	if rep.Position != cp {
		t.Fatalf("checked at %d, want %d", rep.Position, cp)
	}

	// 2. The context is cancelled inside a transaction (a stop mid-batch).
	p = newProjector(t, store, opts)
	cctx, cancel := context.WithCancel(ctx)
	var from uint64
	sqlviews.SetBeforeCommit(p, func(c context.Context, next uint64) error {
		from = p.Committed()
		cancel()
		<-c.Done()
		return c.Err()
	})
	if err := p.Run(cctx); err != nil {
		t.Fatalf("Run ended by its context: %v, want nil", err)
	}
	if from != cp {
		t.Errorf("the second run resumed from %d, want the checkpoint %d", from, cp)
	}
	if cp2, _ := sqlviews.Checkpoint(ctx, pool, opts); cp2 != cp {
		t.Fatalf("checkpoint moved to %d by a cancelled transaction (was %d)", cp2, cp)
	}
	mustEqualRebuild(t, store, schema)

	// 3. A clean run goes on from the checkpoint to the head.
	if err := newProjector(t, store, opts).CatchUpTo(ctx, h); err != nil {
		t.Fatal(err)
	}
	if rep := mustEqualRebuild(t, store, schema); rep.Position != h {
		t.Fatalf("at %d after catching up, want %d", rep.Position, h)
	}
}

// smallLog returns a memory log with two actions and a few requests (no
// executor: they stay requested), and the command side to add more.
func smallLog(t *testing.T) (eventstore.Store, *command.Service) {
	t.Helper()
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { _ = store.Close() })
	c := &command.Service{Store: store, Writer: "test"}
	ctx := pgtest.Context(t)
	for _, ref := range []string{"a", "b"} {
		if _, err := c.DefineAction(ctx, domain.Policy{Ref: ref, Runner: "core.noop", MaxConcurrent: 2}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if _, _, err := c.Request(ctx, command.Request{Action: "a", Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	return store, c
}

// TestResetFencesAndStandby: a standby takes over when the active projector
// stops; Reset empties the tables under a running projector, whose next
// transaction is refused (ErrFenced) without writing; run again, it folds
// from position 0.
func TestResetFencesAndStandby(t *testing.T) {
	store, c := smallLog(t)
	schema := viewsSchema(t)
	ctx, pool := pgtest.Context(t), sharedPool.Get(t)
	opts := sqlviews.Options{Schema: schema, Logger: quietLogger()}

	first := newProjector(t, store, opts)
	stopFirst := runProjector(t, first)
	if err := sqlviews.WaitFor(ctx, pool, opts, head(t, store)); err != nil {
		t.Fatal(err)
	}
	second := newProjector(t, store, opts)
	stopSecond := runProjector(t, second)
	if _, err := c.DefineAction(ctx, domain.Policy{Ref: "c", Runner: "core.noop"}); err != nil {
		t.Fatal(err)
	}
	if err := sqlviews.WaitFor(ctx, pool, opts, head(t, store)); err != nil {
		t.Fatal(err)
	}
	if !first.Active() || second.Active() {
		t.Fatalf("active: first %v, second %v; want only the first", first.Active(), second.Active())
	}
	if err := stopFirst(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DefineAction(ctx, domain.Policy{Ref: "d", Runner: "core.noop"}); err != nil {
		t.Fatal(err)
	}
	if err := sqlviews.WaitFor(ctx, pool, opts, head(t, store)); err != nil {
		t.Fatalf("the standby did not take over: %v", err)
	}
	mustEqualRebuild(t, store, schema)

	// Reset under the running (second) projector.
	if err := sqlviews.Reset(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Request(ctx, command.Request{Action: "b", Input: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	// The second projector's next transaction is fenced: Run returns.
	waitfor.That(t, "the second projector to stop", func() bool { return !second.Active() })
	if err := stopSecond(); !errors.Is(err, sqlviews.ErrFenced) {
		t.Fatalf("the projector running across a Reset: %v, want ErrFenced", err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+schema+".executions) + (SELECT count(*) FROM "+schema+".queue_stats)").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if cp, _ := sqlviews.Checkpoint(ctx, pool, opts); cp != 0 || n != 0 {
		t.Fatalf("after Reset and a fenced transaction: checkpoint %d, %d rows; want 0 and 0", cp, n)
	}
	if err := newProjector(t, store, opts).CatchUpTo(ctx, head(t, store)); err != nil {
		t.Fatal(err)
	}
	if rep := mustEqualRebuild(t, store, schema); rep.Executions != 6 || rep.QueueStats != 4 {
		t.Fatalf("after the rebuild from 0: %+v", rep)
	}
}

// TestAheadOfTheLog: tables folded from a longer log are refused.
func TestAheadOfTheLog(t *testing.T) {
	store, _ := smallLog(t)
	schema := viewsSchema(t)
	ctx := pgtest.Context(t)
	if err := newProjector(t, store, sqlviews.Options{Schema: schema}).CatchUpTo(ctx, head(t, store)); err != nil {
		t.Fatal(err)
	}
	shorter := memstore.New(memstore.Options{})
	defer shorter.Close()
	err := newProjector(t, shorter, sqlviews.Options{Schema: schema}).CatchUpTo(ctx, 0)
	if !errors.Is(err, sqlviews.ErrAhead) {
		t.Fatalf("CatchUpTo on a shorter log: %v, want ErrAhead", err)
	}
}

// TestValuesPostgreSQLCannotHold: NUL in strings, numbers beyond numeric,
// escapes; the projector stores them (documented replacements) instead of
// stopping, and a rebuild agrees.
func TestValuesPostgreSQLCannotHold(t *testing.T) {
	store, c := smallLog(t)
	schema := viewsSchema(t)
	ctx, pool := pgtest.Context(t), sharedPool.Get(t)
	id, _, err := c.Request(ctx, command.Request{Action: "b",
		Input: json.RawMessage(`{"nul":"a\u0000b","big":1e999999,"long":` + strings.Repeat("9", 1500) + `,"ok":1.5e3,"esc":"tab\there \u00e9 \ud83d\ude00"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := newProjector(t, store, sqlviews.Options{Schema: schema}).CatchUpTo(ctx, head(t, store)); err != nil {
		t.Fatal(err)
	}
	var nul, big, long, esc string
	var ok float64
	if err := pool.QueryRow(ctx, `SELECT input->>'nul', input->>'big', input->>'long', (input->'ok')::float8, input->>'esc' FROM `+schema+`.executions WHERE id = $1`, id).
		Scan(&nul, &big, &long, &ok, &esc); err != nil {
		t.Fatal(err)
	}
	if nul != "a\uFFFDb" || big != "1e999999" || long != strings.Repeat("9", 1500) || ok != 1500 || esc != "tab\there é 😀" {
		t.Fatalf("stored: nul %q big %q long %d digits ok %v esc %q", nul, big, len(long), ok, esc)
	}
	mustEqualRebuild(t, store, schema)
}

// TestSingleStreamLog: the tables fold a log written on the executor's
// single-stream path (a store without atomic multi-stream appends, as
// KurrentDB) like the API's read model does, partial writes included: the
// lifecycle run by a node on storetest.SingleStream, then, with no executor
// left to complete them, a grant without its handoff (it holds its slot), a
// void grant of an execution that had ended, and an action change announced
// on its queue stream without its action event.
func TestSingleStreamLog(t *testing.T) {
	ctx, pool := pgtest.Context(t), sharedPool.Get(t)
	pg, _ := logStore(t)
	store := storetest.SingleStream(pg)
	if err := runLifecycle(ctx, store); err != nil {
		t.Fatal(err)
	}
	put := func(stream string, ev domain.Event) {
		t.Helper()
		env, err := codec.Events.Encode(uuid.New(), ev, domain.OwnerExecutor, "x")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Append(ctx, stream, eventstore.Any, env); err != nil {
			t.Fatal(err)
		}
	}
	cmds := &command.Service{Store: store, Writer: "test"}
	var waiting, gone string
	var err error
	for _, id := range []*string{&waiting, &gone} {
		if *id, _, err = cmds.Request(ctx, command.Request{Action: "t.noop", Input: json.RawMessage(`{"partial":true}`)}); err != nil {
			t.Fatal(err)
		}
	}
	put(domain.ExecutionStream(gone), domain.ExecutionCancelled{Reason: "cancelled while it waited", Code: domain.CancelRequested})
	put(domain.QueueStream("t.noop"), domain.QueueGranted{Execution: waiting})
	put(domain.QueueStream("t.noop"), domain.QueueGranted{Execution: gone}) // void: it ended before
	a, err := cmds.LoadAction(ctx, "t.fail")
	if err != nil {
		t.Fatal(err)
	}
	pause, err := codec.Events.Encode(uuid.New(), domain.ActionPaused{Reason: "announced"}, domain.OwnerAPI, "test")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(pause)
	if err != nil {
		t.Fatal(err)
	}
	announce, err := codec.Events.Encode(uuid.New(), domain.QueueActionChanged{ActionVersion: uint64(a.Version() + 1), Change: pause.Type, Event: raw}, domain.OwnerAPI, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, domain.QueueStream("t.fail"), eventstore.Any, announce); err != nil {
		t.Fatal(err)
	}

	rep, err := projections.Audit(ctx, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.VoidGrants != 1 {
		t.Fatalf("audit of the single-stream log: %d violations %v, %d void grants (want 1)", len(rep.Violations), rep.Violations, rep.VoidGrants)
	}
	views := projections.NewViews()
	if err := views.CatchUp(ctx, store); err != nil {
		t.Fatal(err)
	}
	st, _ := views.Stats("t.noop")
	if x, _ := views.View(waiting); x.Status != domain.StatusRequested || st.ActiveCount != 1 {
		t.Fatalf("the grant without its handoff: %s is %s, t.noop has %d active; want requested, 1", waiting, x.Status, st.ActiveCount)
	}
	rowsEqualTheAPI(t, store)
	schema := viewsSchema(t)
	if err := newProjector(t, store, sqlviews.Options{Schema: schema, MaxBatch: 9}).CatchUpTo(ctx, head(t, store)); err != nil {
		t.Fatal(err)
	}
	mustEqualRebuild(t, store, schema)
	var active int
	if err := pool.QueryRow(ctx, "SELECT active_count FROM "+schema+".queue_stats WHERE action = 't.noop'").Scan(&active); err != nil || active != 1 {
		t.Fatalf("queue_stats t.noop active_count %d (%v), want 1: the grant without its handoff holds its slot", active, err)
	}
}

// TestResumesFromItsSnapshot: with Options.Snapshots, a projector saves its
// fold at committed checkpoints, and the next run starts from the latest
// snapshot instead of position 0, with tables equal to a rebuild. A damaged
// snapshot, or one past the checkpoint (tables reset), is not used.
func TestResumesFromItsSnapshot(t *testing.T) {
	store, _ := lifecycleLog(t)
	schema := viewsSchema(t)
	ctx, pool := pgtest.Context(t), sharedPool.Get(t)
	files := &projections.SnapshotFiles{Dir: t.TempDir()}
	opts := sqlviews.Options{Schema: schema, MaxBatch: 50, Snapshots: files, SnapshotEvery: 100, Logger: quietLogger()}
	h := head(t, store)
	if h < 400 {
		t.Fatalf("the lifecycle log has %d events; the test wants a few hundred", h)
	}

	first := newProjector(t, store, opts)
	if err := first.CatchUpTo(ctx, h/2); err != nil {
		t.Fatal(err)
	}
	if first.Resumed() != 0 {
		t.Fatalf("the first run resumed from %d, want 0 (no snapshot yet)", first.Resumed())
	}
	second := newProjector(t, store, opts)
	if err := second.CatchUpTo(ctx, h); err != nil {
		t.Fatal(err)
	}
	if r := second.Resumed(); r < 100 || r > h/2+50 {
		t.Fatalf("the second run resumed from %d, want a snapshot between 100 and the first run's checkpoint", r)
	}
	mustEqualRebuild(t, store, schema)

	// A damaged snapshot is refused: the fold starts from 0, the tables stay right.
	path := filepath.Join(files.Dir, "sqlviews-"+sqlviews.DefaultName+".snapshot")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	third := newProjector(t, store, opts)
	if err := third.CatchUpTo(ctx, h); err != nil {
		t.Fatal(err)
	}
	if third.Resumed() != 0 {
		t.Fatalf("a damaged snapshot was used (resumed from %d)", third.Resumed())
	}
	mustEqualRebuild(t, store, schema)

	// Tables reset and caught up a little: an intact snapshot past their
	// checkpoint is not used.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := sqlviews.Reset(ctx, pool, sqlviews.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	if err := newProjector(t, store, opts).CatchUpTo(ctx, h); err != nil { // from 0, saving snapshots up to near h
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no snapshot saved: %v", err)
	}
	if err := sqlviews.Reset(ctx, pool, sqlviews.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	early := newProjector(t, store, opts)
	if err := early.CatchUpTo(ctx, 20); err != nil {
		t.Fatal(err)
	}
	late := newProjector(t, store, opts)
	if err := late.CatchUpTo(ctx, h); err != nil {
		t.Fatal(err)
	}
	if late.Resumed() != 0 {
		t.Fatalf("a snapshot past the checkpoint was used (resumed from %d)", late.Resumed())
	}
	mustEqualRebuild(t, store, schema)
}

// TestRetentionKeepsEveryRow: with Options.RetainEnded the projector's fold
// forgets ended executions, but only once their rows are committed: the
// tables still hold every execution, equal to a rebuild, across flushes of
// a few events each and a restart.
func TestRetentionKeepsEveryRow(t *testing.T) {
	store, _ := lifecycleLog(t)
	schema := viewsSchema(t)
	ctx, pool := pgtest.Context(t), sharedPool.Get(t)
	opts := sqlviews.Options{Schema: schema, MaxBatch: 30, RetainEnded: 2, Logger: quietLogger()}
	h := head(t, store)
	p := newProjector(t, store, opts)
	if err := p.CatchUpTo(ctx, h/2); err != nil {
		t.Fatal(err)
	}
	stop := runProjector(t, newProjector(t, store, opts))
	if err := sqlviews.WaitFor(ctx, pool, sqlviews.Options{Schema: schema}, h); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if p.Evicted() == 0 {
		t.Fatal("the fold forgot no ended execution: the retention was not exercised")
	}
	rep := mustEqualRebuild(t, store, schema)
	want := projections.NewViews()
	if err := want.CatchUpTo(ctx, store, h); err != nil {
		t.Fatal(err)
	}
	if all, _ := want.ExecutionsSince(0, "", 1<<30); rep.Executions != len(all) {
		t.Fatalf("%d execution rows, the log has %d executions", rep.Executions, len(all))
	}
}
