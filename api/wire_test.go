package api

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
)

// TestWireMatchesTheReadModel: each wire document encodes byte for byte as
// the read model's value it is converted from did before the API had its
// own types, with every field set and with every field zero.
func TestWireMatchesTheReadModel(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	full := map[string][2]any{
		"action": {projections.ActionView{Policy: domain.Policy{Ref: "a", Runner: "core.noop", MaxConcurrent: 1, MaxQueueLength: 2,
			QueueTimeoutSeconds: 3, TimeoutSeconds: 4, ScheduledTimeoutSeconds: 5, MaxAttempts: 6, RateLimit: &domain.RateLimit{Count: 7, PerSeconds: 8},
			ConcurrencyKey: "k", OnLimit: "reject"}, Paused: true, Version: 9}, nil},
		"execution": {projections.ExecutionView{ExecutionState: domain.ExecutionState{ID: "x", Action: "a", ConcurrencyKey: "k", Parent: "p",
			ItemIndex: 1, Items: 2, Concurrency: 3, Children: []string{"c"}, ChildrenAsked: 4, Status: domain.StatusRunning, Worker: "w",
			Attempt: 5, CancelAsked: true, Input: json.RawMessage(`{"i":1}`), Result: json.RawMessage(`{"r":2}`), Error: "e", Code: "c",
			RequestedAt: &at, SchedulingAt: &at, ScheduledAt: &at, RunningAt: &at, EndedAt: &at, Version: 6}, Position: 7}, nil},
		"stats": {projections.QueueStats{Action: "a", QueueLength: 1, ActiveCount: 2, MaxConcurrent: 3, Paused: true, OldestEnqueuedAt: &at,
			TotalEnqueued: 4, TotalGranted: 5, TotalCompleted: 6, TotalFailed: 7, TotalTimedOut: 8, TotalRejected: 9, TotalCancelled: 10,
			WaitP50Ms: 1.5, WaitP95Ms: 2.5, Position: 11}, nil},
		"queue": {projections.QueueContents{Action: "a", Paused: true, Waiting: []projections.WaiterView{{ID: "x", ConcurrencyKey: "k", Position: 1, EnqueuedAt: at}},
			Active: []string{"y"}, Position: 2}, nil},
		"worker": {projections.WorkerView{ID: "w", Status: domain.WorkerStatus("live"), Incarnation: "i", Slots: 1, Runners: []string{"core.noop"},
			LastSeen: &at, InFlight: 2, Executions: []string{"x"}}, nil},
		"event": {domain.Envelope{Stream: "s", Version: 1, Position: 2, ID: uuid.MustParse("0b0e8f3c-58a4-4f0e-8f57-8c6f1d6f0d42"), Type: "t",
			SchemaVersion: 3, Time: at, Owner: domain.OwnerAPI, CorrelationID: "c", CausationID: "d", Writer: "w",
			Data: json.RawMessage(`{"a":1}`), Metadata: json.RawMessage(`{"m":2}`)}, nil},
	}
	zero := map[string][2]any{
		"action":    {projections.ActionView{}, nil},
		"execution": {projections.ExecutionView{}, nil},
		"stats":     {projections.QueueStats{}, nil},
		"queue":     {projections.QueueContents{Waiting: []projections.WaiterView{}, Active: []string{}}, nil},
		"worker":    {projections.WorkerView{Executions: []string{}}, nil},
		"event":     {domain.Envelope{}, nil},
	}
	for _, set := range []map[string][2]any{full, zero} {
		for name, c := range set {
			var conv any
			switch v := c[0].(type) {
			case projections.ActionView:
				conv = actionOut(v)
			case projections.ExecutionView:
				conv = executionOut(v)
			case projections.QueueStats:
				conv = statsOut(v)
			case projections.QueueContents:
				conv = queueOut(v)
			case projections.WorkerView:
				conv = workerOut(v)
			case domain.Envelope:
				conv = eventOut(&v)
			}
			want, _ := json.Marshal(c[0])
			got, _ := json.Marshal(conv)
			if string(got) != string(want) {
				t.Errorf("%s:\n got %s\nwant %s", name, got, want)
			}
		}
	}
	var p domain.Policy
	_ = json.Unmarshal([]byte(`{"ref":"a","runner":"r","rate_limit":{"count":1,"per_seconds":2},"retry":{"max_attempts":3,"backoff_seconds":0.5,"backoff_multiplier":3,"max_backoff_seconds":60}}`), &p)
	if back, _ := json.Marshal(policyOut(policyIn(policyOut(p)))); string(back) != mustJSON(p) {
		t.Errorf("policy round trip: %s, want %s", back, mustJSON(p))
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
