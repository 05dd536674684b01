package projections_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
)

// logWriter appends events straight to a store, bypassing every check, the
// way a buggy or malicious writer could.
type logWriter struct {
	t     *testing.T
	store eventstore.Store
}

func (w logWriter) put(stream string, owner domain.Owner, writer string, ev domain.Event) {
	w.t.Helper()
	env, err := codec.Events.Encode(uuid.New(), ev, owner, writer)
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.store.Append(context.Background(), stream, eventstore.Any, env); err != nil {
		w.t.Fatal(err)
	}
}

func (w logWriter) action(ref string, limit int) {
	p := domain.Policy{Ref: ref, Runner: "core.noop", MaxConcurrent: limit}.WithDefaults()
	w.put(domain.ActionStream(ref), domain.OwnerAPI, "", domain.ActionDefined{Policy: p})
}

func (w logWriter) request(id, ref string) {
	w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionRequested{Action: ref})
}

func (w logWriter) grant(id, ref, worker string) {
	w.put(domain.QueueStream(ref), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: id})
	w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionScheduling{})
	w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionScheduled{Worker: worker, Attempt: 1, Action: ref, Runner: "core.noop"})
}

// parent requests a with_items parent of n items and window c, and starts it.
func (w logWriter) parent(id, ref string, n, c int) {
	items := make([]json.RawMessage, n)
	for i := range items {
		items[i] = json.RawMessage(fmt.Sprint(i))
	}
	w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionRequested{Action: ref, Items: n, Concurrency: c, WithItems: items})
	w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionRunning{})
}

// announce writes parent's execution.children_requested for items first..first+n-1.
func (w logWriter) announce(parent string, first, n int) {
	w.put(domain.ExecutionStream(parent), domain.OwnerExecutor, "x", domain.ExecutionChildrenRequested{First: first, Count: n})
}

// child requests item i of parent, with its derived id, which it returns.
func (w logWriter) child(parent, ref string, i int) string {
	id := domain.ChildID(parent, i)
	w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionRequested{Action: ref, Parent: parent, ItemIndex: i})
	return id
}

func (w logWriter) reject(id string) {
	w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionRejected{Code: "test"})
}

func (w logWriter) run(id, worker string) {
	w.put(domain.ExecutionStream(id), domain.OwnerWorker, worker, domain.ExecutionRunning{Worker: worker, Attempt: 1})
	w.put(domain.ExecutionStream(id), domain.OwnerWorker, worker, domain.ExecutionCompleted{})
}

// auditCase is a log written by a buggy or malicious writer, and the rule
// the audit finds it breaks ("" for none).
type auditCase struct {
	name  string
	write func(w logWriter)
	rule  string
}

// auditCases returns the logs TestAuditFindsEachKindOfViolation audits
// (TestAuditLiveFromACheckpoint audits them from every position).
func auditCases() []auditCase {
	return []auditCase{
		{"clean log", func(w logWriter) {
			w.action("a", 1)
			w.request("e1", "a")
			w.grant("e1", "a", "w1")
			w.run("e1", "w1")
		}, ""},
		{"grant out of FIFO order", func(w logWriter) {
			w.action("a", 2)
			w.request("e1", "a")
			w.request("e2", "a")
			w.grant("e2", "a", "w1")
		}, "grant"},
		{"grant over the limit", func(w logWriter) {
			w.action("a", 1)
			w.request("e1", "a")
			w.request("e2", "a")
			w.grant("e1", "a", "w1")
			w.grant("e2", "a", "w1")
		}, "grant"},
		{"grant while paused", func(w logWriter) {
			w.action("a", 1)
			w.put(domain.ActionStream("a"), domain.OwnerAPI, "", domain.ActionPaused{})
			w.request("e1", "a")
			w.grant("e1", "a", "w1")
		}, "grant"},
		{"slot taken without a queue grant", func(w logWriter) {
			w.action("a", 1)
			w.request("e1", "a")
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionScheduling{})
		}, "grant"},
		{"worker writes for an execution handed to another", func(w logWriter) {
			w.action("a", 1)
			w.request("e1", "a")
			w.grant("e1", "a", "w1")
			w.put(domain.ExecutionStream("e1"), domain.OwnerWorker, "w2", domain.ExecutionRunning{Worker: "w2", Attempt: 1})
		}, domain.RuleHandoff},
		{"executor writes a worker's event", func(w logWriter) {
			w.action("a", 1)
			w.request("e1", "a")
			w.grant("e1", "a", "w1")
			w.put(domain.ExecutionStream("e1"), domain.OwnerWorker, "w1", domain.ExecutionRunning{Worker: "w1", Attempt: 1})
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionCompleted{})
		}, domain.RuleOwner},
		{"second terminal event", func(w logWriter) {
			w.action("a", 1)
			w.request("e1", "a")
			w.grant("e1", "a", "w1")
			w.run("e1", "w1")
			w.put(domain.ExecutionStream("e1"), domain.OwnerWorker, "w1", domain.ExecutionFailed{Error: "again"})
		}, domain.RuleTerminal},
		{"running before the handoff", func(w logWriter) {
			w.action("a", 1)
			w.request("e1", "a")
			w.put(domain.ExecutionStream("e1"), domain.OwnerWorker, "w1", domain.ExecutionRunning{Worker: "w1"})
		}, domain.RuleTransition},
		{"owner not allowed for the type", func(w logWriter) {
			w.put(domain.ActionStream("a"), domain.OwnerWorker, "w1", domain.ActionDefined{Policy: domain.Policy{Ref: "a", Runner: "core.noop"}.WithDefaults()})
		}, domain.RuleOwner},
		{"grant over the rate limit", func(w logWriter) {
			p := domain.Policy{Ref: "a", Runner: "core.noop", MaxConcurrent: 5, RateLimit: &domain.RateLimit{Count: 1, PerSeconds: 3600}}.WithDefaults()
			w.put(domain.ActionStream("a"), domain.OwnerAPI, "", domain.ActionDefined{Policy: p})
			w.request("e1", "a")
			w.request("e2", "a")
			w.grant("e1", "a", "w1")
			w.grant("e2", "a", "w1")
		}, "grant"},
		{"clean with_items", func(w logWriter) {
			w.action("a", 5)
			w.parent("p", "a", 3, 2)
			w.announce("p", 0, 2)
			c0 := w.child("p", "a", 0)
			c1 := w.child("p", "a", 1)
			w.reject(c0)
			w.announce("p", 2, 1)
			c2 := w.child("p", "a", 2)
			w.reject(c1)
			w.reject(c2)
			w.put(domain.ExecutionStream("p"), domain.OwnerExecutor, "x", domain.ExecutionFailed{Error: "3 items failed"})
		}, ""},
		{"with_items parent asks over its window", func(w logWriter) {
			w.action("a", 5)
			w.parent("p", "a", 3, 2)
			w.announce("p", 0, 2)
			w.child("p", "a", 0)
			w.child("p", "a", 1)
			w.announce("p", 2, 1)
		}, "with_items"},
		{"with_items child not asked for by its parent", func(w logWriter) {
			w.action("a", 5)
			w.parent("p", "a", 3, 3)
			w.announce("p", 0, 1)
			w.child("p", "a", 0)
			w.child("p", "a", 1)
		}, "with_items"},
		{"with_items out of item order", func(w logWriter) {
			w.action("a", 5)
			w.parent("p", "a", 3, 3)
			w.announce("p", 0, 2)
			w.child("p", "a", 1)
		}, "with_items"},
		{"with_items parent asks out of item order", func(w logWriter) {
			w.action("a", 5)
			w.parent("p", "a", 3, 3)
			w.announce("p", 1, 1)
		}, domain.RuleAttempt},
		{"with_items child with another id", func(w logWriter) {
			w.action("a", 5)
			w.parent("p", "a", 3, 3)
			w.announce("p", 0, 1)
			w.put(domain.ExecutionStream("c0"), domain.OwnerExecutor, "x", domain.ExecutionRequested{Action: "a", Parent: "p", ItemIndex: 0})
		}, "with_items"},
		{"with_items children after a cancel request", func(w logWriter) {
			w.action("a", 5)
			w.parent("p", "a", 3, 3)
			w.put(domain.ExecutionStream("p"), domain.OwnerAPI, "", domain.ExecutionCancelRequested{})
			w.announce("p", 0, 1)
		}, domain.RuleAttempt},
		{"with_items parent ends before its children", func(w logWriter) {
			w.action("a", 5)
			w.parent("p", "a", 1, 1)
			w.announce("p", 0, 1)
			w.child("p", "a", 0)
			w.put(domain.ExecutionStream("p"), domain.OwnerExecutor, "x", domain.ExecutionCompleted{})
		}, "with_items"},
		{"with_items parent ends before a child it asked for exists", func(w logWriter) {
			w.action("a", 5)
			w.parent("p", "a", 1, 1)
			w.announce("p", 0, 1)
			w.put(domain.ExecutionStream("p"), domain.OwnerExecutor, "x", domain.ExecutionCancelled{})
		}, "with_items"},
		{"with_items parent completes before all items", func(w logWriter) {
			w.action("a", 5)
			w.parent("p", "a", 2, 1)
			w.announce("p", 0, 1)
			w.reject(w.child("p", "a", 0))
			w.put(domain.ExecutionStream("p"), domain.OwnerExecutor, "x", domain.ExecutionCompleted{})
		}, "with_items"},
		{"late write of a lost incarnation", func(w logWriter) {
			w.action("a", 1)
			w.request("e1", "a")
			w.put(domain.QueueStream("a"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: "e1"})
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionScheduling{})
			w.put(domain.WorkerStream("w1"), domain.OwnerWorker, "w1", domain.WorkerRegistered{Incarnation: "i1", Slots: 1})
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionScheduled{Worker: "w1", Incarnation: "i1", Attempt: 1, Action: "a", Runner: "core.noop"})
			w.put(domain.WorkerStream("w1"), domain.OwnerExecutor, "x", domain.WorkerLost{Incarnation: "i1"})
			w.put(domain.ExecutionStream("e1"), domain.OwnerWorker, "w1", domain.ExecutionRunning{Worker: "w1", Attempt: 1})
		}, "lease"},
		{"lost by the lease on a worker that owed nothing", func(w logWriter) {
			w.put(domain.WorkerStream("w1"), domain.OwnerWorker, "w1", domain.WorkerRegistered{Incarnation: "i1", Slots: 1})
			w.put(domain.WorkerStream("w1"), domain.OwnerExecutor, "x", domain.WorkerLost{Incarnation: "i1", LeaseMillis: 1})
		}, "lease"},
		{"lost by the lease before the lease passed since the handoff", func(w logWriter) {
			w.action("a", 1)
			w.request("e1", "a")
			w.put(domain.WorkerStream("w1"), domain.OwnerWorker, "w1", domain.WorkerRegistered{Incarnation: "i1", Slots: 1})
			w.put(domain.QueueStream("a"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: "e1"})
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionScheduling{})
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionScheduled{Worker: "w1", Incarnation: "i1", Attempt: 1, Action: "a", Runner: "core.noop"})
			w.put(domain.WorkerStream("w1"), domain.OwnerExecutor, "x", domain.WorkerLost{Incarnation: "i1", LeaseMillis: 60_000})
		}, "lease"},
		{"lost by the lease once it passed since the handoff", func(w logWriter) {
			w.action("a", 1)
			w.request("e1", "a")
			w.put(domain.WorkerStream("w1"), domain.OwnerWorker, "w1", domain.WorkerRegistered{Incarnation: "i1", Slots: 1})
			w.put(domain.QueueStream("a"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: "e1"})
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionScheduling{})
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionScheduled{Worker: "w1", Incarnation: "i1", Attempt: 1, Action: "a", Runner: "core.noop"})
			time.Sleep(5 * time.Millisecond) // the log's clock passes the 1 ms lease
			w.put(domain.WorkerStream("w1"), domain.OwnerExecutor, "x", domain.WorkerLost{Incarnation: "i1", LeaseMillis: 1})
		}, ""},
		{"handed to an incarnation that does not serve its runner", func(w logWriter) {
			w.action("a", 1)
			w.request("e1", "a")
			w.put(domain.WorkerStream("w1"), domain.OwnerWorker, "w1", domain.WorkerRegistered{Incarnation: "i1", Slots: 1, Runners: []string{"other"}})
			w.put(domain.QueueStream("a"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: "e1"})
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionScheduling{})
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionScheduled{Worker: "w1", Incarnation: "i1", Attempt: 1, Action: "a", Runner: "core.noop"})
		}, "runner"},
		{"handed to an incarnation that never registered", func(w logWriter) {
			w.action("a", 1)
			w.request("e1", "a")
			w.put(domain.WorkerStream("w1"), domain.OwnerWorker, "w1", domain.WorkerRegistered{Incarnation: "i1", Slots: 1, Runners: []string{"core.noop"}})
			w.put(domain.QueueStream("a"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: "e1"})
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionScheduling{})
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionScheduled{Worker: "w1", Incarnation: "i2", Attempt: 1, Action: "a", Runner: "core.noop"})
		}, "runner"},
		{"handed to an incarnation that serves its runner", func(w logWriter) {
			w.action("a", 1)
			w.request("e1", "a")
			w.put(domain.WorkerStream("w1"), domain.OwnerWorker, "w1", domain.WorkerRegistered{Incarnation: "i1", Slots: 1, Runners: []string{"x.y", "core.noop"}})
			w.put(domain.QueueStream("a"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: "e1"})
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionScheduling{})
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionScheduled{Worker: "w1", Incarnation: "i1", Attempt: 1, Action: "a", Runner: "core.noop"})
		}, ""},
		// The partial states of the executor's single-stream path (a store
		// without atomic multi-stream appends) are lawful.
		{"single-stream grant whose handoff comes later", func(w logWriter) {
			w.action("a", 1)
			w.request("e1", "a")
			w.request("e2", "a")
			w.put(domain.QueueStream("a"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: "e1"})
			w.request("e3", "a")
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionScheduling{})
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionScheduled{Worker: "w1", Attempt: 1, Action: "a", Runner: "core.noop"})
			w.run("e1", "w1")
			w.grant("e2", "a", "w1")
		}, ""},
		{"single-stream grant that lost to a cancellation is void", func(w logWriter) {
			w.action("a", 1)
			w.request("e1", "a")
			w.request("e2", "a")
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionCancelled{})
			w.put(domain.QueueStream("a"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: "e1"})
			w.grant("e2", "a", "w1") // the void grant took no slot
		}, ""},
		{"single-stream grant cancelled before its handoff", func(w logWriter) {
			w.action("a", 1)
			w.request("e1", "a")
			w.request("e2", "a")
			w.put(domain.QueueStream("a"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: "e1"})
			w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionCancelled{})
			w.grant("e2", "a", "w1")
		}, ""},
		{"grant of an execution already granted", func(w logWriter) {
			w.action("a", 2)
			w.request("e1", "a")
			w.put(domain.QueueStream("a"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: "e1"})
			w.put(domain.QueueStream("a"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: "e1"})
		}, "grant"},
		{"single-stream children announced before a cancel request", func(w logWriter) {
			w.action("a", 5)
			w.parent("p", "a", 2, 2)
			w.announce("p", 0, 2)
			c0 := w.child("p", "a", 0)
			w.put(domain.ExecutionStream("p"), domain.OwnerAPI, "", domain.ExecutionCancelRequested{})
			c1 := w.child("p", "a", 1)
			w.reject(c0)
			w.reject(c1)
			w.put(domain.ExecutionStream("p"), domain.OwnerExecutor, "x", domain.ExecutionCancelled{})
		}, ""},
		{"undecodable event", func(w logWriter) {
			env := domain.Envelope{ID: uuid.New(), Type: "execution.requested", SchemaVersion: 1, Owner: domain.OwnerExecutor, Data: []byte(`{"nope":1}`)}
			if _, err := w.store.Append(context.Background(), "execution-bad", eventstore.Any, env); err != nil {
				w.t.Fatal(err)
			}
		}, "decode"},
	}
}

func TestAuditFindsEachKindOfViolation(t *testing.T) {
	t.Parallel()
	for _, tc := range auditCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := memstore.New(memstore.Options{})
			defer func() { _ = store.Close() }()
			tc.write(logWriter{t, store})
			rep, err := projections.Audit(context.Background(), store, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.rule == "" {
				if !rep.OK() {
					t.Fatalf("clean log reported: %+v", rep.Violations)
				}
				return
			}
			for _, v := range rep.Violations {
				if v.Rule == tc.rule {
					return
				}
			}
			t.Fatalf("want a %q violation, got %s", tc.rule, fmt.Sprint(rep.Violations))
		})
	}
}
