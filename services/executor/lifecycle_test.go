package executor_test

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

	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/bus"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/executor"
	"github.com/turnstile/turnstile/services/worker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func quietLogger() *slog.Logger {
	if os.Getenv("TURNSTILE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// system is executors, workers, the bus and its forwarder on one store.
type system struct {
	store     eventstore.Store
	bus       *bus.Bus
	executors []*executor.Executor
	workers   []*worker.Worker
	fwd       *bus.Forwarder
	cmds      *command.Service
}

func startSystem(t *testing.T, store eventstore.Store, executors, workers, slots int) *system {
	t.Helper()
	ctx := context.Background()
	log := quietLogger()
	s := &system{store: store, bus: bus.NewInProcess(log), cmds: &command.Service{Store: store, Writer: "test"}}
	for i := 0; i < workers; i++ {
		w, err := worker.New(worker.Config{ID: fmt.Sprintf("w%d", i+1), Slots: slots, Store: store, Bus: s.bus, Logger: log, Heartbeat: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		s.workers = append(s.workers, w)
	}
	fwd, err := bus.NewForwarder(bus.ForwarderConfig{Store: store, Publisher: s.bus.Publisher, Checkpoints: &projections.MemCheckpoints{}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := fwd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s.fwd = fwd
	for i := 0; i < executors; i++ {
		e, err := executor.New(executor.Config{Store: store, Logger: log, Name: fmt.Sprintf("executor-%d", i+1), Tick: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		s.executors = append(s.executors, e)
	}
	t.Cleanup(s.stop)
	return s
}

func (s *system) stop() {
	for _, e := range s.executors {
		e.Stop()
	}
	s.executors = nil
	for _, w := range s.workers {
		w.Stop()
	}
	s.workers = nil
	if s.fwd != nil {
		s.fwd.Stop()
		s.fwd = nil
	}
	_ = s.bus.Close()
}

// waitIdle waits until the first executor's fold holds no live execution.
func (s *system) waitIdle(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	head, err := s.store.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for s.executors[0].Position() < head && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for time.Now().Before(deadline) {
		live := -1
		s.executors[0].Inspect(func(st *projections.State) { live = len(st.LiveIDs()) })
		if live == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.executors[0].Inspect(func(st *projections.State) {
		ids := st.LiveIDs()
		for _, id := range ids {
			x := st.Execution(id)
			t.Logf("still live: %s %s attempt %d worker %s", id, x.Status(), x.Attempt(), x.Worker())
			break
		}
		t.Fatalf("%d executions still live after %s", len(ids), timeout)
	})
}

func define(t *testing.T, cmds *command.Service, ref, runner string, limit int) {
	t.Helper()
	if _, err := cmds.DefineAction(context.Background(), domain.Policy{Ref: ref, Runner: runner, MaxConcurrent: limit, MaxQueueLength: 100_000}); err != nil {
		t.Fatal(err)
	}
}

// requestAll sends n requests spread over refs from g goroutines and returns
// the ids in the order they were accepted per action.
func requestAll(t *testing.T, cmds *command.Service, refs []string, n, g int, input string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, g)
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := i; j < n; j += g {
				ref := refs[j%len(refs)]
				if _, _, err := cmds.Request(context.Background(), command.Request{Action: ref, Input: json.RawMessage(input)}); err != nil {
					errs <- err
					return
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func audit(t *testing.T, store eventstore.Store, wantEnded int) *projections.AuditReport {
	t.Helper()
	rep, err := projections.Audit(context.Background(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range rep.Violations {
		if i >= 20 {
			break
		}
		t.Errorf("violation at %d (%s %s): %s: %s", v.Position, v.Stream, v.Type, v.Rule, v.Detail)
	}
	if len(rep.Open) != 0 {
		t.Errorf("%d executions have no terminal event, e.g. %s", len(rep.Open), rep.Open[0])
	}
	if rep.Ended != wantEnded {
		t.Errorf("ended %d executions, want %d (by status %v)", rep.Ended, wantEnded, rep.ByStatus)
	}
	return rep
}

// grantOrderMatchesRequests checks, by folding the log, that each action's
// grants came in the order of its requests, and that the number granted and
// not ended never exceeded the limit at any position.
func grantOrderMatchesRequests(t *testing.T, store eventstore.Store, limits map[string]int) {
	t.Helper()
	evs, err := store.ReadAll(context.Background(), 0, 10_000_000)
	if err != nil {
		t.Fatal(err)
	}
	requested := map[string][]string{}
	grants := map[string][]string{}
	actionOf := map[string]string{}
	active := map[string]int{}
	isActive := map[string]bool{}
	for i := range evs {
		env := &evs[i]
		ev, err := codec.Events.Decode(env)
		if err != nil {
			t.Fatal(err)
		}
		_, id := domain.SplitStream(env.Stream)
		switch e := ev.(type) {
		case domain.ExecutionRequested:
			if e.Items > 0 {
				break // a with_items parent takes no slot
			}
			requested[e.Action] = append(requested[e.Action], id)
			actionOf[id] = e.Action
		case domain.QueueGranted:
			a := actionOf[e.Execution]
			grants[a] = append(grants[a], e.Execution)
			active[a]++
			isActive[e.Execution] = true
			if active[a] > limits[a] {
				t.Fatalf("position %d: %d executions of %s hold a slot, limit %d", env.Position, active[a], a, limits[a])
			}
		case domain.ExecutionCompleted, domain.ExecutionFailed, domain.ExecutionTimedOut, domain.ExecutionCancelled:
			if isActive[id] {
				isActive[id] = false
				active[actionOf[id]]--
			}
		}
	}
	for a, req := range requested {
		if len(grants[a]) != len(req) {
			t.Errorf("%s: %d requests, %d grants", a, len(req), len(grants[a]))
			continue
		}
		for i := range req {
			if req[i] != grants[a][i] {
				t.Fatalf("%s: grant %d is %s, but request %d was %s: not FIFO", a, i, grants[a][i], i, req[i])
			}
		}
	}
}

func TestFIFOAndLimits(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		store := newStore(single)
		defer func() { _ = store.Close() }()
		s := startSystem(t, store, 1, 2, 16)
		limits := map[string]int{"fifo.one": 1, "fifo.two": 2, "fifo.eight": 8}
		for ref, l := range limits {
			define(t, s.cmds, ref, "core.sleep", l)
		}
		requestAll(t, s.cmds, []string{"fifo.one", "fifo.two", "fifo.eight"}, 1000, 16, `{"seconds":0.001}`)
		s.waitIdle(t, 60*time.Second)
		rep := audit(t, store, 1000)
		if rep.ByStatus["completed"] != 1000 {
			t.Errorf("by status %v, want 1000 completed", rep.ByStatus)
		}
		grantOrderMatchesRequests(t, store, limits)
	})
}

func TestTwoExecutorsKeepTheLimit(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		store := newStore(single)
		defer func() { _ = store.Close() }()
		s := startSystem(t, store, 2, 3, 8)
		limits := map[string]int{"two.one": 1, "two.three": 3}
		for ref, l := range limits {
			define(t, s.cmds, ref, "core.sleep", l)
		}
		requestAll(t, s.cmds, []string{"two.one", "two.three"}, 400, 8, `{"seconds":0.001}`)
		s.waitIdle(t, 60*time.Second)
		audit(t, store, 400)
		grantOrderMatchesRequests(t, store, limits)
		conflicts := int64(0)
		for _, e := range s.executors {
			conflicts += e.Stats.Conflicts.Load()
		}
		t.Logf("executors lost %d races to each other (each one a grant refused by the fence)", conflicts)
	})
}

func TestRejectionsAndFailures(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		store := newStore(single)
		defer func() { _ = store.Close() }()
		s := startSystem(t, store, 1, 1, 4)
		define(t, s.cmds, "rej.fail", "core.fail", 2)
		ctx := context.Background()
		if _, _, err := s.cmds.Request(ctx, command.Request{Action: "rej.unknown"}); err != nil {
			t.Fatal(err)
		}
		failID, _, err := s.cmds.Request(ctx, command.Request{Action: "rej.fail", Input: json.RawMessage(`{"message":"boom"}`)})
		if err != nil {
			t.Fatal(err)
		}
		s.waitIdle(t, 20*time.Second)
		rep := audit(t, store, 2)
		if rep.ByStatus["rejected"] != 1 || rep.ByStatus["failed"] != 1 {
			t.Fatalf("by status %v, want one rejected and one failed", rep.ByStatus)
		}
		evs, err := store.ReadStream(ctx, domain.ExecutionStream(failID), 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		last, _ := codec.Events.Decode(&evs[len(evs)-1])
		if f, ok := last.(domain.ExecutionFailed); !ok || f.Error != "boom" {
			t.Fatalf("last event %#v, want execution.failed with boom", last)
		}
		if evs[len(evs)-1].Owner != domain.OwnerWorker || evs[len(evs)-1].Writer != "w1" {
			t.Fatalf("failed written by %s %s, want worker w1", evs[len(evs)-1].Owner, evs[len(evs)-1].Writer)
		}
	})
}

// TestTwoExecutorsWithCancellations: two executors on one log while a client
// cancels waiters at random. On a single-stream log a grant decided on a
// stale fold may land after the waiter's cancellation (the queue stream does
// not fence the execution's): the audit must find it void, never a grant of
// something not waiting, and the limits and FIFO must hold for the rest.
func TestTwoExecutorsWithCancellations(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		store := newStore(single)
		defer func() { _ = store.Close() }()
		s := startSystem(t, store, 2, 2, 4)
		define(t, s.cmds, "cx.one", "core.sleep", 1)
		define(t, s.cmds, "cx.three", "core.sleep", 3)
		ctx := context.Background()
		var ids []string
		for i := range 120 {
			ref := []string{"cx.one", "cx.three"}[i%2]
			id, _, err := s.cmds.Request(ctx, command.Request{Action: ref, Input: json.RawMessage(`{"seconds":0.002}`)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		for i, id := range ids {
			if i%3 != 0 {
				continue
			}
			if err := s.cmds.RequestCancel(ctx, id, "test"); err != nil && !errors.Is(err, command.ErrAlreadyEnded) {
				t.Fatal(err)
			}
		}
		s.waitIdle(t, 60*time.Second)
		rep := audit(t, store, len(ids))
		t.Logf("by status %v, %d grants, %d void", rep.ByStatus, rep.Grants, rep.VoidGrants)
		if !single && rep.VoidGrants != 0 {
			t.Errorf("%d void grants on a log with atomic multi-stream appends", rep.VoidGrants)
		}
	})
}
