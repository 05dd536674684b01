// The API's answers are client/wire documents: this file converts the read
// model's values and the domain's into them, and a request's policy back.
package api

import (
	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
)

func policyIn(p wire.Policy) domain.Policy {
	out := domain.Policy{Ref: p.Ref, Runner: p.Runner, MaxConcurrent: p.MaxConcurrent, MaxQueueLength: p.MaxQueueLength,
		QueueTimeoutSeconds: p.QueueTimeoutSeconds, TimeoutSeconds: p.TimeoutSeconds, ScheduledTimeoutSeconds: p.ScheduledTimeoutSeconds,
		MaxAttempts: p.MaxAttempts, ConcurrencyKey: p.ConcurrencyKey, OnLimit: p.OnLimit, RunnerConfig: p.RunnerConfig, MaxConcurrentTotal: p.MaxConcurrentTotal}
	if p.RateLimit != nil {
		out.RateLimit = &domain.RateLimit{Count: p.RateLimit.Count, PerSeconds: p.RateLimit.PerSeconds}
	}
	if r := p.Retry; r != nil {
		out.Retry = &domain.RetryPolicy{MaxAttempts: r.MaxAttempts, BackoffSeconds: r.BackoffSeconds,
			BackoffMultiplier: r.BackoffMultiplier, MaxBackoffSeconds: r.MaxBackoffSeconds}
	}
	for _, n := range p.Resources {
		out.Resources = append(out.Resources, domain.ResourceNeed{Name: n.Name, Units: n.Units})
	}
	return out
}

func policyOut(p domain.Policy) wire.Policy {
	out := wire.Policy{Ref: p.Ref, Runner: p.Runner, MaxConcurrent: p.MaxConcurrent, MaxQueueLength: p.MaxQueueLength,
		QueueTimeoutSeconds: p.QueueTimeoutSeconds, TimeoutSeconds: p.TimeoutSeconds, ScheduledTimeoutSeconds: p.ScheduledTimeoutSeconds,
		MaxAttempts: p.MaxAttempts, ConcurrencyKey: p.ConcurrencyKey, OnLimit: p.OnLimit, RunnerConfig: p.RunnerConfig, MaxConcurrentTotal: p.MaxConcurrentTotal}
	if p.RateLimit != nil {
		out.RateLimit = &wire.RateLimit{Count: p.RateLimit.Count, PerSeconds: p.RateLimit.PerSeconds}
	}
	if r := p.Retry; r != nil {
		out.Retry = &wire.Retry{MaxAttempts: r.MaxAttempts, BackoffSeconds: r.BackoffSeconds,
			BackoffMultiplier: r.BackoffMultiplier, MaxBackoffSeconds: r.MaxBackoffSeconds}
	}
	for _, n := range p.Resources {
		out.Resources = append(out.Resources, wire.ResourceNeed{Name: n.Name, Units: n.Units})
	}
	return out
}

func actionOut(a projections.ActionView) wire.Action {
	return wire.Action{Policy: policyOut(a.Policy), Paused: a.Paused, Version: a.Version, Served: a.Served}
}

func executionOut(v projections.ExecutionView) wire.Execution {
	x := &v.ExecutionState
	return wire.Execution{ID: x.ID, Action: x.Action, ConcurrencyKey: x.ConcurrencyKey, Parent: x.Parent, ItemIndex: x.ItemIndex,
		Items: x.Items, Concurrency: x.Concurrency, Children: x.Children, ChildrenAsked: x.ChildrenAsked, Status: string(x.Status),
		Worker: x.Worker, Attempt: x.Attempt, CancelAsked: x.CancelAsked, Input: x.Input, Result: x.Result, Error: x.Error, Code: x.Code,
		RequestedAt: x.RequestedAt, SchedulingAt: x.SchedulingAt, ScheduledAt: x.ScheduledAt, RunningAt: x.RunningAt, EndedAt: x.EndedAt,
		Version: x.Version, Position: v.Position, Archived: v.Archived}
}

func statsOut(s projections.QueueStats) wire.QueueStats {
	return wire.QueueStats{Action: s.Action, QueueLength: s.QueueLength, ActiveCount: s.ActiveCount, MaxConcurrent: s.MaxConcurrent,
		Paused: s.Paused, OldestEnqueuedAt: s.OldestEnqueuedAt, TotalEnqueued: s.TotalEnqueued, TotalGranted: s.TotalGranted,
		TotalCompleted: s.TotalCompleted, TotalFailed: s.TotalFailed, TotalTimedOut: s.TotalTimedOut, TotalRejected: s.TotalRejected,
		TotalCancelled: s.TotalCancelled, WaitP50Ms: s.WaitP50Ms, WaitP95Ms: s.WaitP95Ms, Position: s.Position}
}

func queueOut(q projections.QueueContents) wire.Queue {
	out := wire.Queue{Action: q.Action, Paused: q.Paused, Waiting: make([]wire.Waiter, len(q.Waiting)), Active: q.Active, Position: q.Position}
	for i, w := range q.Waiting {
		out.Waiting[i] = wire.Waiter{ID: w.ID, ConcurrencyKey: w.ConcurrencyKey, Position: w.Position, EnqueuedAt: w.EnqueuedAt, Priority: w.Priority}
	}
	if out.Active == nil {
		out.Active = []string{}
	}
	return out
}

func eventOut(e *domain.Envelope) wire.Event {
	return wire.Event{Stream: e.Stream, Version: e.Version, Position: e.Position, ID: e.ID.String(), Type: e.Type,
		SchemaVersion: e.SchemaVersion, Time: e.Time, Owner: string(e.Owner), CorrelationID: e.CorrelationID,
		CausationID: e.CausationID, Writer: e.Writer, Data: e.Data, Metadata: e.Metadata}
}

func workerOut(w projections.WorkerView) wire.Worker {
	out := wire.Worker{ID: w.ID, Status: string(w.Status), Incarnation: w.Incarnation, Slots: w.Slots, Runners: w.Runners,
		LastSeen: w.LastSeen, InFlight: w.InFlight, Executions: w.Executions}
	if out.Executions == nil {
		out.Executions = []string{}
	}
	return out
}

// each converts a list, never nil (an empty list is [] in JSON).
func each[T, W any](in []T, conv func(T) W) []W {
	out := make([]W, len(in))
	for i, v := range in {
		out[i] = conv(v)
	}
	return out
}
