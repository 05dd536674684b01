package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/repository"
)

// TestWriteForAnotherWorkersExecution: a worker's writes go through the
// handoff rule on the execution's latest state (the path worker.run takes),
// so a worker writing for an execution handed to another worker is refused
// with a *domain.RuleError and nothing is stored, before and after the
// owner started it; the owner's own writes pass. A raw append that skips
// the rule is caught by the audit.
func TestWriteForAnotherWorkersExecution(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	defer func() { _ = store.Close() }()
	const id = "x1"
	p := domain.Policy{Ref: "act", Runner: "core.noop"}.WithDefaults()
	req, err := domain.NewExecution(id).Request(domain.ExecutionRequested{Action: "act"})
	if err != nil {
		t.Fatal(err)
	}
	renv, err := codec.Events.Encode(uuid.New(), req, domain.OwnerExecutor, "executor")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, domain.ExecutionStream(id), eventstore.NoStream, renv); err != nil {
		t.Fatal(err)
	}
	for _, step := range []repository.Decide{
		func(x *domain.Execution) (domain.Event, error) { return x.Grant("") },
		func(x *domain.Execution) (domain.Event, error) { return x.Schedule("w1", "inc-1", p) },
	} {
		if _, err := repository.UpdateExecution(ctx, store, id, domain.OwnerExecutor, "executor", nil, step); err != nil {
			t.Fatal(err)
		}
	}
	intruder := func(what string, decide repository.Decide) {
		t.Helper()
		head, _ := store.Head(ctx)
		_, err := repository.UpdateExecution(ctx, store, id, domain.OwnerWorker, "w2", nil, decide)
		var re *domain.RuleError
		if !errors.As(err, &re) {
			t.Errorf("w2 %s an execution handed to w1: err %v, want a *domain.RuleError", what, err)
		}
		if after, _ := store.Head(ctx); after != head {
			t.Errorf("w2 %s: %d events stored", what, after-head)
		}
	}
	intruder("starts", func(x *domain.Execution) (domain.Event, error) { return x.Start("w2") })
	intruder("completes", func(x *domain.Execution) (domain.Event, error) {
		return x.Complete(domain.OwnerWorker, "w2", json.RawMessage(`{}`))
	})
	if _, err := repository.UpdateExecution(ctx, store, id, domain.OwnerWorker, "w1", nil, func(x *domain.Execution) (domain.Event, error) { return x.Start("w1") }); err != nil {
		t.Fatalf("w1 starts its own execution: %v", err)
	}
	intruder("completes", func(x *domain.Execution) (domain.Event, error) {
		return x.Complete(domain.OwnerWorker, "w2", json.RawMessage(`{}`))
	})
	intruder("fails", func(x *domain.Execution) (domain.Event, error) {
		return x.Fail(domain.OwnerWorker, "w2", "not mine", nil)
	})
	intruder("cancels", func(x *domain.Execution) (domain.Event, error) {
		return x.Cancel(domain.OwnerWorker, "w2", "not mine")
	})

	// Skipping the rule with a raw append does not go unnoticed.
	env, err := codec.Events.Encode(uuid.New(), domain.ExecutionCompleted{}, domain.OwnerWorker, "w2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, domain.ExecutionStream(id), eventstore.Any, env); err != nil {
		t.Fatal(err)
	}
	rep, err := projections.Audit(ctx, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	// (This setup grants with no queue stream, which the audit also notes.)
	found := false
	for _, v := range rep.Violations {
		found = found || (v.Rule == domain.RuleHandoff && v.Type == domain.TypeExecutionCompleted && v.Stream == domain.ExecutionStream(id))
	}
	if !found {
		t.Errorf("audit of a completion written by w2: %+v, want a handoff violation", rep.Violations)
	}
}
