package executor_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/services/clock"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/executor"
	"github.com/turnstile/turnstile/services/worker"
)

// outage is a store whose appends and stream reads fail, writing nothing,
// while down is set: a timeout whose outcome the executor cannot read back.
type outage struct {
	eventstore.Store
	down bool
}

func (s *outage) AtomicMultiStream() bool { return eventstore.AtomicMultiStream(s.Store) }

var errOutage = errors.New("outage: timed out")

func (s *outage) Append(ctx context.Context, stream string, expected eventstore.ExpectedVersion, events ...domain.Envelope) (eventstore.AppendResult, error) {
	if s.down {
		return eventstore.AppendResult{}, errOutage
	}
	return s.Store.Append(ctx, stream, expected, events...)
}

func (s *outage) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	if s.down {
		return eventstore.AppendResult{}, errOutage
	}
	return s.Store.AppendMulti(ctx, appends...)
}

func (s *outage) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]domain.Envelope, error) {
	if s.down {
		return nil, errOutage
	}
	return s.Store.ReadStream(ctx, stream, from, limit)
}

// TestHandoffOfUnknownOutcomeIsDecidedAgain: a grant and handoff to the
// only worker that runs the action's runner fails with an unknown outcome
// that cannot be read back (it did not land). The executor keeps the
// worker's slot for it, but the next cycle must decide the same execution
// again on that slot: before, the slot stayed "in hand" until the fold
// showed the handoff, which never came, so the worker looked full forever
// and its executions waited forever. Found by the simulation (seed
// 3551712423572107166, split brain, mixed runners).
func TestHandoffOfUnknownOutcomeIsDecidedAgain(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	clk := clock.NewManual(t0)
	store := &outage{Store: clockedStore(clk, false)}
	cmds := &command.Service{Store: store, Writer: "test"}
	if _, err := cmds.DefineAction(ctx, domain.Policy{Ref: "q", Runner: "core.noop", MaxConcurrent: 2, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Config{ID: "w1", Slots: 1, Store: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(ctx); err != nil {
		t.Fatal(err)
	}
	x := requestOne(t, cmds, "q")
	y := requestOne(t, cmds, "q")
	e, err := executor.New(executor.Config{Store: store, Clock: clk, Logger: quiet, Name: "exec-a", WorkerLease: 1 << 62})
	if err != nil {
		t.Fatal(err)
	}
	fold := func() {
		evs, err := store.ReadAll(ctx, e.Position(), 1000)
		if err != nil {
			t.Fatal(err)
		}
		e.Fold(evs)
	}
	grants := func(what string) []executor.Decision {
		t.Helper()
		var out []executor.Decision
		ds := e.Decide(false)
		for _, d := range ds {
			if strings.HasPrefix(d.What(), "grant") {
				out = append(out, d)
			}
		}
		if len(out) != 1 {
			t.Fatalf("%s: decisions %v, want one grant", what, whats(ds))
		}
		return out
	}
	fold()
	e.DecideAtStart()
	first := grants("first cycle")
	store.down = true
	if err := e.Commit(ctx, first[0]); err == nil {
		t.Fatal("the grant's append landed through the outage")
	}
	store.down = false
	fold()
	// The slot is held for x alone: y gets nothing, x is decided again.
	again := grants("after the unknown outcome")
	if err := e.Commit(ctx, again[0]); err != nil {
		t.Fatal(err)
	}
	fold()
	evs, err := store.ReadStream(ctx, domain.ExecutionStream(x), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1]; last.Type != domain.TypeExecutionScheduled {
		t.Fatalf("x's last event is %s, want its handoff", last.Type)
	}
	if ys, _ := store.ReadStream(ctx, domain.ExecutionStream(y), 0, 10); len(ys) != 1 {
		t.Fatalf("y has %d events, want its request alone (w1's one slot is x's)", len(ys))
	}
	if ds := e.Decide(false); len(ds) != 0 {
		t.Fatalf("w1 is full: decisions %v", whats(ds))
	}
}
