package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/internal/waitfor"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/bus"
	"github.com/turnstile/turnstile/services/clock"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/executor"
	"github.com/turnstile/turnstile/services/runner"
	"github.com/turnstile/turnstile/services/worker"
)

// t0 is where the tests' manual clocks start.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// waitLimit bounds every wait: a failure guard, never a timing assertion.
const waitLimit = 30 * time.Second

// ---- a slog handler that keeps what was logged ----

type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]any
}

type recorder struct {
	mu      sync.Mutex
	records []logRecord
	attrs   []slog.Attr
	parent  *recorder
	echo    slog.Handler
}

func newRecorder() *recorder {
	r := &recorder{}
	if os.Getenv("TURNSTILE_TEST_LOG") != "" {
		r.echo = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})
	}
	return r
}

func (r *recorder) root() *recorder {
	for r.parent != nil {
		r = r.parent
	}
	return r
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *recorder) Handle(ctx context.Context, rec slog.Record) error {
	lr := logRecord{level: rec.Level, msg: rec.Message, attrs: map[string]any{}}
	for _, a := range r.attrs {
		lr.attrs[a.Key] = a.Value.Any()
	}
	rec.Attrs(func(a slog.Attr) bool {
		lr.attrs[a.Key] = a.Value.Any()
		return true
	})
	root := r.root()
	root.mu.Lock()
	root.records = append(root.records, lr)
	root.mu.Unlock()
	if root.echo != nil {
		h := root.echo.WithAttrs(r.attrs)
		return h.Handle(ctx, rec)
	}
	return nil
}

func (r *recorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &recorder{parent: r.root(), attrs: append(append([]slog.Attr{}, r.attrs...), attrs...)}
}

func (r *recorder) WithGroup(string) slog.Handler { return r }

// find returns the records whose message contains msg and whose attributes
// include every given key with the given value.
func (r *recorder) find(msg string, kv ...any) []logRecord {
	root := r.root()
	root.mu.Lock()
	defer root.mu.Unlock()
	var out []logRecord
next:
	for _, rec := range root.records {
		if !strings.Contains(rec.msg, msg) {
			continue
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if fmt.Sprint(rec.attrs[kv[i].(string)]) != fmt.Sprint(kv[i+1]) {
				continue next
			}
		}
		out = append(out, rec)
	}
	return out
}

func (r *recorder) errorsLogged() []logRecord {
	root := r.root()
	root.mu.Lock()
	defer root.mu.Unlock()
	var out []logRecord
	for _, rec := range root.records {
		if rec.level >= slog.LevelError {
			out = append(out, rec)
		}
	}
	return out
}

// ---- a runner the test controls ----

// gate is a runner whose runs block until the test releases them (or their
// context ends: then it returns an *runner.Interrupted with a partial result).
type gate struct {
	mu      sync.Mutex
	waiting int
	started int
	release chan struct{}
}

func newGate() *gate { return &gate{release: make(chan struct{})} }

func (g *gate) Run(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
	g.mu.Lock()
	g.waiting++
	g.started++
	ch := g.release
	g.mu.Unlock()
	select {
	case <-ch: // ReleaseAll has already taken it off the waiting count
		return json.RawMessage(`{"released":true}`), nil
	case <-ctx.Done():
		g.mu.Lock()
		if ch == g.release {
			g.waiting--
		}
		g.mu.Unlock()
		return nil, &runner.Interrupted{Err: fmt.Errorf("test.gate: %w", ctx.Err()), Result: json.RawMessage(`{"partial":true}`)}
	}
}

// Waiting returns how many runs are blocked now.
func (g *gate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

// Started returns how many runs have started.
func (g *gate) Started() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.started
}

// ReleaseAll lets every blocked run return at once.
func (g *gate) ReleaseAll() {
	g.mu.Lock()
	g.waiting = 0
	close(g.release)
	g.release = make(chan struct{})
	g.mu.Unlock()
}

// bothLogs runs test on a log with atomic multi-stream appends and on one
// without them (storetest.SingleStream, as on KurrentDB), where the
// executor takes its single-stream path.
func bothLogs(t *testing.T, test func(t *testing.T, single bool)) {
	t.Helper()
	for _, single := range []bool{false, true} {
		name := "multi-stream"
		if single {
			name = "single-stream"
		}
		t.Run(name, func(t *testing.T) { test(t, single) })
	}
}

// newStore returns an empty memstore, without atomic multi-stream appends
// if single.
func newStore(single bool) eventstore.Store {
	s := memstore.New(memstore.Options{})
	if single {
		return storetest.SingleStream(s)
	}
	return s
}

// ---- the harness: the real services on one store, a manual clock ----

type harnessConfig struct {
	embedded     bool          // the embedded store in a temp dir (default memstore)
	single       bool          // the store without atomic multi-stream appends (storetest.SingleStream)
	lease        time.Duration // executor's WorkerLease (default 1h: no worker is lost unless a test means it)
	noForwarder  bool          // start the forwarder later, with startForwarder
	noExecutor   bool          // start the executor later, with startExecutor
	beforeAppend func(what string)
	loseAtStart  bool
	executors    int // executors deciding at once on the same log (default 1); h.exec is the first
	// execStore, if set, is the store the executors use, made from the
	// harness's (which the workers and commands use).
	execStore func(eventstore.Store) eventstore.Store
	// checkpointEvery is the executors' Config.CheckpointEvery (0: none).
	checkpointEvery time.Duration
}

type harness struct {
	t     *testing.T
	cfg   harnessConfig
	clock *clock.Manual
	store eventstore.Store
	bus   *bus.Bus
	logs  *recorder
	log   *slog.Logger
	exec  *executor.Executor
	more  []*executor.Executor // the other executors, if any
	fwd   *bus.Forwarder
	cmds  *command.Service

	workers []*worker.Worker
}

func newHarness(t *testing.T, cfg harnessConfig) *harness {
	t.Helper()
	h := &harness{t: t, cfg: cfg, clock: clock.NewManual(t0), logs: newRecorder()}
	h.log = slog.New(h.logs)
	if cfg.embedded {
		s, err := embedded.Open(filepath.Join(t.TempDir(), "log"), embedded.Options{Clock: h.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		h.store = s
	} else {
		h.store = memstore.New(memstore.Options{Clock: h.clock.Now})
	}
	if cfg.single {
		h.store = storetest.SingleStream(h.store)
	}
	h.bus = bus.NewInProcess(h.log)
	h.cmds = &command.Service{Store: h.store, Writer: "test-api"}
	t.Cleanup(h.stop)
	if !cfg.noExecutor {
		h.startExecutor()
	}
	if !cfg.noForwarder {
		h.startForwarder()
	}
	return h
}

func (h *harness) startExecutor() {
	h.t.Helper()
	lease := h.cfg.lease
	if lease == 0 {
		lease = time.Hour
	}
	store := h.store
	if h.cfg.execStore != nil {
		store = h.cfg.execStore(store)
	}
	for i := range max(h.cfg.executors, 1) {
		e, err := executor.New(executor.Config{Store: store, Clock: h.clock, Logger: h.log, Name: fmt.Sprintf("exec-%d", i+1),
			Tick: 5 * time.Millisecond, WorkerLease: lease, LoseWorkersAtStart: h.cfg.loseAtStart, CheckpointEvery: h.cfg.checkpointEvery})
		if err != nil {
			h.t.Fatal(err)
		}
		if h.cfg.beforeAppend != nil {
			executor.SetBeforeAppend(e, h.cfg.beforeAppend)
		}
		if err := e.Start(context.Background()); err != nil {
			h.t.Fatal(err)
		}
		if i == 0 {
			h.exec = e
		} else {
			h.more = append(h.more, e)
		}
		h.waitFor("the executor to catch up", e.Ready)
	}
}

func (h *harness) startForwarder() {
	h.t.Helper()
	f, err := bus.NewForwarder(bus.ForwarderConfig{Store: h.store, Publisher: h.bus.Publisher, Checkpoints: &projections.MemCheckpoints{}, Logger: h.log})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := f.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.fwd = f
}

// addWorker starts a worker with every built-in runner (core.shell with a
// short kill grace, as the test's user) plus extra, heartbeating every hb
// (real time).
func (h *harness) addWorker(id string, slots int, hb time.Duration, extra map[string]runner.Runner) *worker.Worker {
	h.t.Helper()
	reg := runner.Builtins(runner.Config{Enabled: runner.AllBuiltins, ShellAllowRoot: true, ShellKillGrace: 300 * time.Millisecond})
	for name, r := range extra {
		if err := reg.Register(name, r); err != nil {
			h.t.Fatal(err)
		}
	}
	w, err := worker.New(worker.Config{ID: id, Slots: slots, Store: h.store, Bus: h.bus, Runners: reg, Logger: h.log,
		Heartbeat: hb, StopGrace: 5 * time.Second})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.workers = append(h.workers, w)
	return w
}

func (h *harness) stop() {
	for _, e := range h.more {
		e.Stop()
	}
	h.more = nil
	if h.exec != nil {
		h.exec.Stop()
		h.exec = nil
	}
	var wg sync.WaitGroup
	for _, w := range h.workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.Stop() }()
	}
	wg.Wait()
	h.workers = nil
	if h.fwd != nil {
		h.fwd.Stop()
		h.fwd = nil
	}
	_ = h.bus.Close()
	_ = h.store.Close()
}

func (h *harness) define(p domain.Policy) {
	h.t.Helper()
	if _, err := h.cmds.DefineAction(context.Background(), p); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) request(action, input string) string {
	h.t.Helper()
	r := command.Request{Action: action}
	if input != "" {
		r.Input = json.RawMessage(input)
	}
	id, _, err := h.cmds.Request(context.Background(), r)
	if err != nil {
		h.t.Fatal(err)
	}
	return id
}

// waitFor waits until cond holds (waitfor.That).
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	waitfor.That(h.t, what, cond)
}

// settle waits until the executor has folded the whole log as it is now.
func (h *harness) settle() {
	h.t.Helper()
	head, err := h.store.Head(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	h.waitFor("the executor to fold the log", func() bool { return h.exec.Position() >= head })
}

// cycles waits until the executor has completed n more timed decision
// cycles: whatever they decided is in the log (or was refused) by then.
func (h *harness) cycles(n int64) {
	h.t.Helper()
	target := h.exec.Stats.TimedCycles.Load() + n
	h.waitFor("executor cycles", func() bool { return h.exec.Stats.TimedCycles.Load() >= target })
}

// advance moves the manual clock, then waits until the executor has folded
// the log and decided on the new time (twice: the first cycle may have read
// the clock before it moved).
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	h.clock.Advance(d)
	h.settle()
	h.cycles(2)
}

// quiesce waits until the log stops growing for a few executor cycles.
func (h *harness) quiesce() {
	h.t.Helper()
	for {
		before, err := h.store.Head(context.Background())
		if err != nil {
			h.t.Fatal(err)
		}
		h.settle()
		h.cycles(3)
		after, err := h.store.Head(context.Background())
		if err != nil {
			h.t.Fatal(err)
		}
		if after == before {
			return
		}
	}
}

// loaded folds one execution's stream.
func (h *harness) loaded(id string) *domain.Execution {
	h.t.Helper()
	x, err := h.cmds.LoadExecution(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return x
}

// waitStatus waits until execution id's stream says status.
func (h *harness) waitStatus(id string, status domain.Status) *domain.Execution {
	h.t.Helper()
	var x *domain.Execution
	h.waitFor(fmt.Sprintf("execution %s to be %s", id, status), func() bool {
		var err error
		x, err = h.cmds.LoadExecution(context.Background(), id)
		if errors.Is(err, command.ErrUnknownExecution) {
			return false
		}
		if err != nil {
			h.t.Fatal(err)
		}
		return x.Status() == status
	})
	return x
}

// waitEvent waits until stream holds an event of type typ and returns the
// stream's events.
func (h *harness) waitEvent(stream, typ string) []rec {
	h.t.Helper()
	var evs []rec
	h.waitFor(fmt.Sprintf("%s in %s", typ, stream), func() bool {
		evs = h.stream(stream)
		for _, r := range evs {
			if r.env.Type == typ {
				return true
			}
		}
		return false
	})
	return evs
}

// rec is one decoded event of the log.
type rec struct {
	env domain.Envelope
	ev  domain.Event
}

func decodeAll(t *testing.T, envs []domain.Envelope) []rec {
	t.Helper()
	out := make([]rec, len(envs))
	for i := range envs {
		ev, err := codec.Events.Decode(&envs[i])
		if err != nil {
			t.Fatal(err)
		}
		out[i] = rec{envs[i], ev}
	}
	return out
}

// stream reads and decodes one stream (none if it does not exist).
func (h *harness) stream(stream string) []rec {
	h.t.Helper()
	envs, err := h.store.ReadStream(context.Background(), stream, 0, 100_000)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return decodeAll(h.t, envs)
}

// waitPaid waits until the executor's fold shows that worker id owes the
// log no sign of life older than the clock's now: it holds nothing and was
// handed nothing since it last wrote, or it wrote at now or later. (An idle
// worker writes nothing: a test that moves log time on waits for this, not
// for a heartbeat.)
func (h *harness) waitPaid(id string) {
	h.t.Helper()
	now := h.clock.Now()
	h.waitFor("worker "+id+" to owe no sign of life from before "+now.Format(time.RFC3339Nano), func() bool {
		paid := false
		h.exec.Inspect(func(st *projections.State) {
			w := st.Workers[id]
			if w == nil {
				paid = true
				return
			}
			since, owes := w.OwedSince()
			paid = !owes || !since.Before(now)
		})
		return paid
	})
}

// all reads and decodes the whole log.
func (h *harness) all() []rec {
	h.t.Helper()
	envs, err := h.store.ReadAll(context.Background(), 0, 10_000_000)
	if err != nil {
		h.t.Fatal(err)
	}
	return decodeAll(h.t, envs)
}

// types lists the event types of recs.
func types(recs []rec) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = strings.TrimPrefix(r.env.Type, "execution.")
	}
	return out
}

// auditClean runs projections.Audit on the log and fails on any violation.
func (h *harness) auditClean() *projections.AuditReport {
	h.t.Helper()
	rep, err := projections.Audit(context.Background(), h.store, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	for i, v := range rep.Violations {
		if i >= 20 {
			break
		}
		h.t.Errorf("audit: violation at %d (%s %s): %s: %s", v.Position, v.Stream, v.Type, v.Rule, v.Detail)
	}
	return rep
}

// isRuleError reports whether a logged "err" attribute is a *domain.RuleError.
func isRuleError(v any) bool {
	err, ok := v.(error)
	var re *domain.RuleError
	return ok && errors.As(err, &re)
}
