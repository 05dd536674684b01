package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/eventstore/faulty"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/internal/waitfor"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/node"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitLimit bounds every wait: a failure guard, never a timing assertion.
const waitLimit = 2 * time.Minute

func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(nopWriter{}, &slog.HandlerOptions{Level: slog.LevelError + 1}))
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// TestLifecycleUnderStoreFaults runs the whole lifecycle (the real executor,
// workers, forwarder and command side of services/node) on a store that
// fails at Temporal's persistence-test rates: 5% of appends refused, 5%
// timed out, 5% executed and then reported as timed out, 10% of reads (and
// of subscription batches) timed out. The client retries its requests with
// idempotency keys, as the API tells clients to. Every execution must end,
// exactly once, and the log must pass the audit: no event written twice
// under another id, no grant beyond a limit, no write out of turn. On
// "memstore-single-stream" the faults stand between the node and a store
// without atomic multi-stream appends (storetest.SingleStream, as on
// KurrentDB): the faulty wrapper must say so for the node to take the
// single-stream path, and the faults also cut the executor's and the
// commands' chains of appends short.
func TestLifecycleUnderStoreFaults(t *testing.T) {
	for _, backend := range []string{"memstore", "embedded", "memstore-single-stream"} {
		t.Run(backend, func(t *testing.T) {
			var inner eventstore.Store
			switch backend {
			case "memstore":
				inner = memstore.New(memstore.Options{})
			case "memstore-single-stream":
				inner = storetest.SingleStream(memstore.New(memstore.Options{}))
			default:
				s, err := embedded.Open(filepath.Join(t.TempDir(), "log"), embedded.Options{})
				if err != nil {
					t.Fatal(err)
				}
				inner = s
			}
			store, err := faulty.New(inner, faulty.DefaultRates, 8)
			if err != nil {
				t.Fatal(err)
			}
			runUnderFaults(t, store)
		})
	}
}

// retry calls fn until it succeeds, giving up (and failing the test) after waitLimit.
func retry(t *testing.T, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing: %v", what, err)
		}
		time.Sleep(time.Millisecond)
	}
}

func runUnderFaults(t *testing.T, store *faulty.Store) {
	ctx := context.Background()
	var n *node.Node
	retry(t, "start the node", func() error {
		var err error
		n, err = node.Start(ctx, store, node.Config{Workers: 3, Slots: 4, StopGrace: 5 * time.Second, Logger: quiet()})
		return err
	})
	t.Cleanup(func() { n.Stop(); _ = store.Close() })
	cmds := n.Commands

	actions := []domain.Policy{
		{Ref: "f.one", Runner: "core.noop", MaxConcurrent: 1},
		{Ref: "f.two", Runner: "core.echo", MaxConcurrent: 2},
		{Ref: "f.sleep", Runner: "core.sleep", MaxConcurrent: 3},
		{Ref: "f.fail", Runner: "core.fail", MaxConcurrent: 2},
	}
	for _, p := range actions {
		retry(t, "define "+p.Ref, func() error { _, err := cmds.DefineAction(ctx, p); return err })
	}
	const perAction = 40
	var ids []string
	for i := range perAction {
		for _, p := range actions {
			in := `{}`
			switch p.Runner {
			case "core.sleep":
				in = `{"seconds":0.005}`
			case "core.fail":
				in = `{"message":"as asked"}`
			}
			r := command.Request{Action: p.Ref, Input: json.RawMessage(in), IdempotencyKey: fmt.Sprintf("%s-%d", p.Ref, i)}
			var id string
			retry(t, "request "+r.IdempotencyKey, func() error {
				var err error
				id, _, err = cmds.Request(ctx, r)
				return err
			})
			ids = append(ids, id)
		}
	}
	// A pause, a policy change and a resume while it runs.
	retry(t, "pause", func() error { _, err := cmds.Pause(ctx, "f.two", "test"); return err })
	p := actions[1]
	p.MaxConcurrent = 1
	retry(t, "change policy", func() error { _, err := cmds.ChangePolicy(ctx, p); return err })
	retry(t, "resume", func() error { _, err := cmds.Resume(ctx, "f.two"); return err })
	// Cancel a few (some may have ended already: that is refused, and fine).
	for i := 0; i < len(ids); i += 17 {
		retry(t, "cancel", func() error {
			err := cmds.RequestCancel(ctx, ids[i], "test")
			if errors.Is(err, command.ErrAlreadyEnded) {
				return nil
			}
			return err
		})
	}

	// Every execution ends (read through the wrapped store: no faults there).
	inner := store.Inner()
	for _, id := range ids {
		var status domain.Status
		waitfor.That(t, "execution "+id+" to end", func() bool {
			x, err := (&command.Service{Store: inner}).LoadExecution(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			status = x.Status()
			return status.Terminal()
		}, waitfor.Note(func() string { return "it is still " + string(status) }))
	}
	n.Stop()
	c := store.Counts()
	t.Logf("faults injected: %+v", c)
	if c.ResourceExhausted == 0 || c.Timeouts == 0 || c.TimeoutsAfter == 0 || c.ReadTimeouts == 0 {
		t.Fatalf("some kind of fault was never injected: %+v", c)
	}
	checkLog(t, inner, ids)
}

// checkLog audits the whole log and checks that each execution has exactly
// one terminal event and each attempt at most one running event.
func checkLog(t *testing.T, store eventstore.Store, ids []string) {
	t.Helper()
	ctx := context.Background()
	rep, err := projections.Audit(ctx, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range rep.Violations {
		if i < 20 {
			t.Errorf("audit: %s at %d (%s %s): %s", v.Rule, v.Position, v.Stream, v.Type, v.Detail)
		}
	}
	if len(rep.Open) > 0 {
		t.Errorf("%d executions never ended: %v", len(rep.Open), rep.Open)
	}
	envs, err := store.ReadAll(ctx, 0, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	terminal := map[string]int{}
	running := map[string]int{}
	for i := range envs {
		e := &envs[i]
		cat, id := domain.SplitStream(e.Stream)
		if cat != domain.StreamExecution {
			continue
		}
		switch e.Type {
		case domain.TypeExecutionCompleted, domain.TypeExecutionFailed, domain.TypeExecutionTimedOut,
			domain.TypeExecutionCancelled, domain.TypeExecutionRejected:
			terminal[id]++
		case domain.TypeExecutionRunning:
			ev, err := codec.Events.Decode(e)
			if err != nil {
				t.Fatal(err)
			}
			running[fmt.Sprintf("%s/%d", id, ev.(domain.ExecutionRunning).Attempt)]++
		}
	}
	for _, id := range ids {
		if terminal[id] != 1 {
			t.Errorf("execution %s has %d terminal events", id, terminal[id])
		}
	}
	for k, n := range running {
		if n > 1 {
			t.Errorf("attempt %s started %d times", k, n)
		}
	}
	t.Logf("%d events, %d executions, by status %v", len(envs), rep.Executions, rep.ByStatus)
}
