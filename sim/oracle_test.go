package sim

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/codec"
)

// oracleStep is one event of a walk: its type, writer and payload.
type oracleStep struct {
	typ, owner, writer string
	ev                 domain.Event
}

// oracleEvent returns an event of type typ for the walk (payloads as the
// services write them: the handoff names worker w1, attempt 1).
func oracleEvent(typ string, parent bool) domain.Event {
	switch typ {
	case "execution.requested":
		e := domain.ExecutionRequested{Action: "a"}
		if parent {
			e.Items, e.Concurrency = 2, 1
		}
		return e
	case "execution.rejected":
		return domain.ExecutionRejected{}
	case "execution.scheduling":
		return domain.ExecutionScheduling{}
	case "execution.scheduled":
		return domain.ExecutionScheduled{Worker: "w1", Attempt: 1}
	case "execution.running":
		return domain.ExecutionRunning{Worker: "w1", Attempt: 1}
	case "execution.completed":
		return domain.ExecutionCompleted{}
	case "execution.failed":
		return domain.ExecutionFailed{}
	case "execution.timed_out":
		return domain.ExecutionTimedOut{}
	case "execution.cancelled":
		return domain.ExecutionCancelled{}
	case "execution.cancel_requested":
		return domain.ExecutionCancelRequested{}
	case "execution.handoff_expired":
		return domain.ExecutionHandoffExpired{Worker: "w1", Attempt: 1}
	case "execution.abandoned":
		return domain.ExecutionAbandoned{Worker: "w1", Attempt: 1}
	case "execution.children_requested":
		return domain.ExecutionChildrenRequested{First: 0, Count: 1}
	case "execution.run_failed":
		return domain.ExecutionRunFailed{Worker: "w1", Attempt: 1, Error: "boom"}
	case "execution.retry_scheduled":
		return domain.ExecutionRetryScheduled{Attempt: 1, BackoffMillis: 1000, Action: "a"}
	case "execution.requeued":
		return domain.ExecutionRequeued{Action: "a"}
	}
	return nil
}

// TestOracleAgreesWithDomain walks every history of up to 7 events of one
// execution (plain and with_items parent) and asks both the oracle
// (oracle.go, written from DESIGN.md) and domain's handoff rule
// (domain/rule.go) about every event type from every writer (api, the
// executor, the worker named in the handoff, another worker) at every
// step: they must agree on every answer. One wrong row of domain/rule.go
// (a worker writing for another's execution, a terminal state dropped) is
// a disagreement here, whichever way it errs, and the simulation's checker
// judges by the oracle, so the row cannot hide itself there either.
func TestOracleAgreesWithDomain(t *testing.T) {
	types := domain.ExecutionEventTypes()
	if len(types) != 16 {
		t.Fatalf("domain has %d execution event types, the oracle knows 16: write the new ones' rules into oracle.go from the docs", len(types))
	}
	writers := []struct{ owner, writer string }{{"api", ""}, {"executor", "ex"}, {"worker", "w1"}, {"worker", "w2"}}
	asked, paths := 0, 0
	// Breadth first, so that a disagreement is reported after its shortest history.
	type walkItem struct {
		parent bool
		path   []oracleStep
	}
	queue := []walkItem{{false, nil}, {true, nil}}
	for len(queue) > 0 {
		parent, path := queue[0].parent, queue[0].path
		queue = queue[1:]
		paths++
		x := fold(path)
		o := &oracleExec{state: oNew}
		for i, s := range path {
			data, _ := json.Marshal(s.ev)
			if d := oracleJudge(o, s.typ, s.owner, s.writer, data); d != "" {
				t.Fatalf("the walk's own step %d refused by the oracle: %s", i, d)
			}
		}
		if len(path) == 7 {
			continue
		}
		for _, typ := range types {
			for _, w := range writers {
				ev := oracleEvent(typ, parent)
				if ev == nil {
					t.Fatalf("the walk has no event for %s", typ)
				}
				asked++
				derr := x.Check(typ, domain.Owner(w.owner), w.writer)
				oc := *o
				data, _ := json.Marshal(ev)
				odetail := oracleJudge(&oc, typ, w.owner, w.writer, data)
				if (derr == nil) != (odetail == "") {
					t.Fatalf("after %s, %s by %s %s: domain/rule.go says %v, the documented rule (oracle.go) says %q",
						describe(path), typ, w.owner, w.writer, derr, odetail)
				}
				if derr != nil {
					continue
				}
				next := append(append([]oracleStep(nil), path...), oracleStep{typ, w.owner, w.writer, ev})
				if got := fold(next).Status(); string(got) != oc.state {
					t.Fatalf("after %s, %s by %s: domain leads to %q, the oracle to %q", describe(path), typ, w.owner, got, oc.state)
				}
				queue = append(queue, walkItem{parent, next})
			}
		}
	}
	t.Logf("%d histories, %d questions asked of both rules", paths, asked)
}

// fold is domain's fold of a walk.
func fold(path []oracleStep) *domain.Execution {
	x := domain.NewExecution("x")
	for i, s := range path {
		x.Apply(s.ev, uint64(i), time.Time{})
	}
	return x
}

func describe(path []oracleStep) string {
	s := "new"
	for _, p := range path {
		s += fmt.Sprintf(" → %s(%s %s)", p.typ, p.owner, p.writer)
	}
	return s
}

// TestCheckerJudgesByTheOracle: a log in which worker w2 completes an
// execution handed to w1 breaks the checker with the oracle's rule, before
// domain's rule is asked: so if a row of domain/rule.go let it through
// (the handoff-any-worker mutant of make mutants), the simulation would
// still fail on it.
func TestCheckerJudgesByTheOracle(t *testing.T) {
	policy := domain.Policy{Ref: "a", Runner: "core.noop"}.WithDefaults()
	x := domain.NewExecution("x1")
	req, err := x.Request(domain.ExecutionRequested{Action: "a"})
	if err != nil {
		t.Fatal(err)
	}
	c := newChecker()
	versions := map[string]uint64{}
	write := func(stream string, ev domain.Event, owner domain.Owner, writer string) *violation {
		env, err := codec.Events.Encode(uuid.New(), ev, owner, writer)
		if err != nil {
			t.Fatal(err)
		}
		env.Stream, env.Version, env.Position, env.Time = stream, versions[stream], c.next, t0
		versions[stream]++
		return c.check(&env)
	}
	xs := domain.ExecutionStream("x1")
	for i, step := range []struct {
		stream string
		ev     domain.Event
		owner  domain.Owner
		writer string
	}{
		{domain.ActionStream("a"), domain.ActionDefined{Policy: policy}, domain.OwnerAPI, "api"},
		{xs, req, domain.OwnerExecutor, "ex"},
		{domain.QueueStream("a"), domain.QueueGranted{Execution: "x1"}, domain.OwnerExecutor, "ex"},
		{xs, domain.ExecutionScheduling{}, domain.OwnerExecutor, "ex"},
		{xs, domain.ExecutionScheduled{Worker: "w1", Incarnation: "i1", Attempt: 1}, domain.OwnerExecutor, "ex"},
		{xs, domain.ExecutionRunning{Worker: "w1", Attempt: 1}, domain.OwnerWorker, "w1"},
	} {
		if v := write(step.stream, step.ev, step.owner, step.writer); v != nil {
			t.Fatalf("lawful step %d refused: %v", i, v)
		}
	}
	v := write(xs, domain.ExecutionCompleted{}, domain.OwnerWorker, "w2")
	if v == nil || v.Rule != "oracle" || !strings.Contains(v.Detail, `worker "w2"`) {
		t.Fatalf("w2 completing w1's execution: %v, want the oracle's refusal", v)
	}
}
