package remote_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/services/remote"
	"github.com/turnstile/turnstile/services/repository"
)

// TestSerialFenceRefusesALostSessionsStart: a session holds a handoff, an
// executor declares its incarnation lost on a fold without that handoff (so
// nothing is abandoned: two executors deciding at once), and the session,
// which has not heard the verdict (its follower lags), then writes the
// run's first event: a running report, a terminal report (which records
// the start first), or a poll that starts what it hands. On a log without
// atomic multi-stream appends (storetest.SingleStream, as KurrentDB before
// 26) the heartbeat that must precede that write (serialfence.go) is
// refused: the write is refused with domain.ErrWorkerReplaced (the API's
// 409) and nothing at all is written. Without the fence,
// execution.running by the lost incarnation follows its worker.lost. The
// atomic log refuses it by the worker stream's condition (report.go,
// guard).
func TestSerialFenceRefusesALostSessionsStart(t *testing.T) {
	for _, single := range []bool{false, true} {
		for _, how := range []string{"running report", "completed report", "start poll"} {
			name := "atomic/" + how
			if single {
				name = "single-stream/" + how
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				testLostSessionStart(t, single, how)
			})
		}
	}
}

func testLostSessionStart(t *testing.T, single bool, how string) {
	ctx := context.Background()
	f := newFixture(t, single)
	ss := f.register(t)
	const id = "x1"
	f.request(t, id)
	f.hand(t, id, ss.Incarnation())
	if how != "start poll" {
		f.pollFor(t, ss, id)
	}
	// executor-2, which has not folded the handoff, declares w1 lost.
	if _, err := repository.UpdateWorker(ctx, f.store, "w1", domain.OwnerExecutor, "executor-2", nil, func(w *domain.Worker) (domain.Event, error) {
		return w.DeclareLost(time.Now(), time.Second, true, "its lease expired (test)")
	}); err != nil {
		t.Fatal(err)
	}
	h := f.head(t)
	switch how {
	case "start poll":
		res, err := f.rs.PollStart(ctx, ss, -1, 5*time.Second)
		if err != nil && !errors.Is(err, remote.ErrEnded) {
			t.Fatalf("start poll after the verdict: %v", err)
		}
		if len(res.Assignments) != 0 {
			t.Errorf("a start poll after the verdict handed %+v, want nothing started", res.Assignments)
		}
	default:
		status := remote.ReportRunning
		if how == "completed report" {
			status = remote.ReportCompleted
		}
		_, err := f.rs.Report(ctx, ss, remote.Report{Execution: id, Status: status})
		if !errors.Is(err, domain.ErrWorkerReplaced) {
			t.Errorf("the lost incarnation's %s: %v, want a refusal wrapping domain.ErrWorkerReplaced (409)", how, err)
		}
	}
	if got := f.head(t); got != h {
		t.Errorf("after the verdict the lost incarnation's %s wrote %d events: execution stream %v, worker stream %v",
			how, got-h, f.types(t, domain.ExecutionStream(id)), f.types(t, domain.WorkerStream("w1")))
	}
	if got, want := f.types(t, domain.ExecutionStream(id)), []string{domain.TypeExecutionRequested, domain.TypeExecutionScheduling, domain.TypeExecutionScheduled}; !slices.Equal(got, want) {
		t.Errorf("execution stream %v, want %v (nothing written by the lost incarnation)", got, want)
	}
}

// TestSerialFenceFollowsTheHandoff: the ordering the fence rests on. An
// executor reads w1's stream before handing x1 to it (its verdict will be
// decided on that stale fold); the session then starts the run. On a
// single-stream log the worker stream gets one heartbeat, after the
// handoff and before execution.running, and the run's later writes add
// none (once per run); the stale verdict, appended at the version it
// read, is refused, so nothing the incarnation wrote follows a verdict.
func TestSerialFenceFollowsTheHandoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, true)
	ss := f.register(t)
	const id = "x1"
	f.request(t, id)
	stale, err := repository.LoadWorker(ctx, f.store, "w1")
	if err != nil {
		t.Fatal(err)
	}
	f.hand(t, id, ss.Incarnation())
	f.pollFor(t, ss, id)
	if _, err := f.rs.Report(ctx, ss, remote.Report{Execution: id, Status: remote.ReportRunning}); err != nil {
		t.Fatalf("running: %v", err)
	}
	if _, err := f.rs.Report(ctx, ss, remote.Report{Execution: id, Status: remote.ReportCompleted}); err != nil {
		t.Fatalf("completed: %v", err)
	}
	xs := f.events(t, domain.ExecutionStream(id))
	ws := f.events(t, domain.WorkerStream("w1"))
	if got, want := typesOf(ws), []string{domain.TypeWorkerRegistered, domain.TypeWorkerHeartbeat}; !slices.Equal(got, want) {
		t.Fatalf("worker stream %v, want %v (one fence heartbeat for the run)", got, want)
	}
	if got, want := typesOf(xs), []string{domain.TypeExecutionRequested, domain.TypeExecutionScheduling, domain.TypeExecutionScheduled,
		domain.TypeExecutionRunning, domain.TypeExecutionCompleted}; !slices.Equal(got, want) {
		t.Fatalf("execution stream %v, want %v", got, want)
	}
	hb, handoff, running := ws[1], xs[2], xs[3]
	if !(handoff.Position < hb.Position && hb.Position < running.Position) {
		t.Fatalf("handoff at %d, heartbeat at %d, execution.running at %d: want the heartbeat between them", handoff.Position, hb.Position, running.Position)
	}
	f.staleVerdictRefused(t, stale)
}

// TestSerialFenceOnePerStartPoll: a poll that starts several handoffs at
// once fences them with one heartbeat, after all of their handoffs and
// before all of their starts; a stale verdict is refused.
func TestSerialFenceOnePerStartPoll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, true)
	ss := f.register(t)
	ids := []string{"x1", "x2", "x3"}
	for _, id := range ids {
		f.request(t, id)
	}
	stale, err := repository.LoadWorker(ctx, f.store, "w1")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		f.hand(t, id, ss.Incarnation())
	}
	f.pollFor(t, ss, ids...)
	res, err := f.rs.PollStart(ctx, ss, -1, 0) // all three were delivered: no wait
	if err != nil || len(res.Assignments) != len(ids) {
		t.Fatalf("start poll: %+v, %v; want the %d assignments started", res, err, len(ids))
	}
	ws := f.events(t, domain.WorkerStream("w1"))
	if got, want := typesOf(ws), []string{domain.TypeWorkerRegistered, domain.TypeWorkerHeartbeat}; !slices.Equal(got, want) {
		t.Fatalf("worker stream %v, want %v (one fence heartbeat for the poll's runs)", got, want)
	}
	hb := ws[1]
	for _, id := range ids {
		xs := f.events(t, domain.ExecutionStream(id))
		if got, want := typesOf(xs), []string{domain.TypeExecutionRequested, domain.TypeExecutionScheduling, domain.TypeExecutionScheduled,
			domain.TypeExecutionRunning}; !slices.Equal(got, want) {
			t.Fatalf("%s: execution stream %v, want %v", id, got, want)
		}
		if handoff, running := xs[2], xs[3]; !(handoff.Position < hb.Position && hb.Position < running.Position) {
			t.Fatalf("%s: handoff at %d, heartbeat at %d, execution.running at %d: want the heartbeat between them", id, handoff.Position, hb.Position, running.Position)
		}
	}
	f.staleVerdictRefused(t, stale)
}

// fixture is a remote service on a memstore (single: without atomic
// multi-stream appends) whose follower never sees a worker.lost verdict,
// as one that lags behind it: the fences alone must refuse a lost
// incarnation's writes.
type fixture struct {
	store eventstore.Store
	rs    *remote.Service
}

func newFixture(t testing.TB, single bool) *fixture {
	t.Helper()
	mem := memstore.New(memstore.Options{})
	var store eventstore.Store = mem
	if single {
		store = storetest.SingleStream(mem)
	}
	rs, err := remote.New(remote.Config{Store: lagging{store}, Lease: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := rs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-rs.Started()
	t.Cleanup(func() {
		rs.Stop()
		cancel()
		_ = mem.Close()
	})
	return &fixture{store: store, rs: rs}
}

// lagging is a store whose subscriptions pass over worker.lost.
type lagging struct{ eventstore.Store }

func (l lagging) AtomicMultiStream() bool { return eventstore.AtomicMultiStream(l.Store) }

func (l lagging) Subscribe(ctx context.Context, from uint64, filter eventstore.Filter, handle func([]domain.Envelope) error) error {
	return l.Store.Subscribe(ctx, from, filter, func(batch []domain.Envelope) error {
		kept := slices.DeleteFunc(slices.Clone(batch), func(e domain.Envelope) bool { return e.Type == domain.TypeWorkerLost })
		if len(kept) == 0 {
			return nil
		}
		return handle(kept)
	})
}

func (f *fixture) register(t testing.TB) remote.Session {
	t.Helper()
	op, err := f.rs.Register(context.Background(), remote.Registration{Name: "w1", Runners: []string{"my.job"}, Slots: 4}, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ss, err := f.rs.Authenticate("w1", op.Session)
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

// request writes execution id's request of action "act", as the API would.
func (f *fixture) request(t testing.TB, id string) {
	t.Helper()
	req, err := domain.NewExecution(id).Request(domain.ExecutionRequested{Action: "act"})
	if err != nil {
		t.Fatal(err)
	}
	env, err := codec.Events.Encode(uuid.New(), req, domain.OwnerExecutor, "executor-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Append(context.Background(), domain.ExecutionStream(id), eventstore.NoStream, env); err != nil {
		t.Fatal(err)
	}
}

// hand grants execution id and hands it to w1's incarnation inc, as executor-1 would.
func (f *fixture) hand(t testing.TB, id, inc string) {
	t.Helper()
	p := domain.Policy{Ref: "act", Runner: "my.job"}.WithDefaults()
	for _, step := range []repository.Decide{
		func(x *domain.Execution) (domain.Event, error) { return x.Grant("") },
		func(x *domain.Execution) (domain.Event, error) { return x.Schedule("w1", inc, p) },
	} {
		if _, err := repository.UpdateExecution(context.Background(), f.store, id, domain.OwnerExecutor, "executor-1", nil, step); err != nil {
			t.Fatal(err)
		}
	}
}

// pollFor polls until the session was handed every one of ids.
func (f *fixture) pollFor(t testing.TB, ss remote.Session, ids ...string) {
	t.Helper()
	seen := map[string]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for len(seen) < len(ids) {
		res, err := f.rs.Poll(context.Background(), ss, -1, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range res.Assignments {
			if slices.Contains(ids, a.Execution) {
				seen[a.Execution] = true
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("handed %v of %v", seen, ids)
		}
	}
}

// staleVerdictRefused appends the lost verdict an executor decided on
// stale, w1's stream as it was before the handoffs, at stale's version: it
// must be refused, since the fence's heartbeat is there since.
func (f *fixture) staleVerdictRefused(t *testing.T, stale *domain.Worker) {
	t.Helper()
	verdict, err := stale.DeclareLost(time.Now(), time.Second, true, "its lease expired (test)")
	if err != nil {
		t.Fatal(err)
	}
	env, err := codec.Events.Encode(uuid.New(), verdict, domain.OwnerExecutor, "executor-2")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.store.Append(context.Background(), domain.WorkerStream("w1"), repository.Expected(stale.Version()), env)
	if wv := (*eventstore.WrongVersionError)(nil); !errors.As(err, &wv) {
		t.Fatalf("a verdict decided before the session's runs: append = %v, want a wrong-version refusal", err)
	}
}

func (f *fixture) head(t testing.TB) uint64 {
	t.Helper()
	h, err := f.store.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (f *fixture) events(t testing.TB, stream string) []domain.Envelope {
	t.Helper()
	evs, err := f.store.ReadStream(context.Background(), stream, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func (f *fixture) types(t testing.TB, stream string) []string { return typesOf(f.events(t, stream)) }

func typesOf(evs []domain.Envelope) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}
