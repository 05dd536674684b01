// The planted bugs the simulation must catch (Config.Bug): stores and folds
// that break one rule each, so TestCatchesBugs can prove the checks fail.

package sim

import (
	"context"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
)

// overGrant rewrites the policies in evs with max_concurrent one higher:
// what an executor with an off-by-one limit would decide on.
func overGrant(evs []domain.Envelope) {
	for i := range evs {
		env := &evs[i]
		if env.Type != domain.TypeActionDefined && env.Type != domain.TypeActionPolicyChanged {
			continue
		}
		ev, err := codec.Events.Decode(env)
		if err != nil {
			continue
		}
		switch e := ev.(type) {
		case domain.ActionDefined:
			e.Policy.MaxConcurrent++
			ev = e
		case domain.ActionPolicyChanged:
			e.Policy.MaxConcurrent++
			ev = e
		}
		if re, err := codec.Events.Encode(env.ID, ev, env.Owner, env.Writer); err == nil {
			env.Data = re.Data
		}
	}
}

// noTotal rewrites the policies in evs without max_concurrent_total
// (BugIgnoreTotal).
func noTotal(evs []domain.Envelope) {
	for i := range evs {
		env := &evs[i]
		if env.Type != domain.TypeActionDefined && env.Type != domain.TypeActionPolicyChanged {
			continue
		}
		ev, err := codec.Events.Decode(env)
		if err != nil {
			continue
		}
		switch e := ev.(type) {
		case domain.ActionDefined:
			e.Policy.MaxConcurrentTotal = 0
			ev = e
		case domain.ActionPolicyChanged:
			e.Policy.MaxConcurrentTotal = 0
			ev = e
		}
		if re, err := codec.Events.Encode(env.ID, ev, env.Owner, env.Writer); err == nil {
			env.Data = re.Data
		}
	}
}

// noBackoff rewrites every execution.retry_scheduled in evs with no
// backoff (BugEarlyRequeue).
func noBackoff(evs []domain.Envelope) {
	for i := range evs {
		env := &evs[i]
		if env.Type != domain.TypeExecutionRetryScheduled {
			continue
		}
		ev, err := codec.Events.Decode(env)
		if err != nil {
			continue
		}
		if e, ok := ev.(domain.ExecutionRetryScheduled); ok {
			e.BackoffMillis = 0
			if re, err := codec.Events.Encode(env.ID, e, env.Owner, env.Writer); err == nil {
				env.Data = re.Data
			}
		}
	}
}

// noPriority rewrites every request and requeue in evs with the default
// priority (BugIgnorePriority).
func noPriority(evs []domain.Envelope) {
	for i := range evs {
		env := &evs[i]
		if env.Type != domain.TypeExecutionRequested && env.Type != domain.TypeExecutionRequeued {
			continue
		}
		ev, err := codec.Events.Decode(env)
		if err != nil {
			continue
		}
		switch e := ev.(type) {
		case domain.ExecutionRequested:
			e.Priority = 0
			ev = e
		case domain.ExecutionRequeued:
			e.Priority = 0
			ev = e
		}
		if re, err := codec.Events.Encode(env.ID, ev, env.Owner, env.Writer); err == nil {
			env.Data = re.Data
		}
	}
}

// buggy is a log with a deliberate defect (see Bug).
type buggy struct {
	*memstore.Store
	bug   Bug
	ticks int // BugTickTwice: the ticks moved so far
}

func (b *buggy) Append(ctx context.Context, stream string, expected eventstore.ExpectedVersion, events ...domain.Envelope) (eventstore.AppendResult, error) {
	return b.AppendMulti(ctx, eventstore.StreamAppend{Stream: stream, Expected: expected, Events: events})
}

func (b *buggy) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	as := append([]eventstore.StreamAppend(nil), appends...)
	for i := range as {
		cat, _ := domain.SplitStream(as[i].Stream)
		switch {
		case b.bug == BugUnfencedGrants && cat == domain.StreamQueue:
			as[i].Expected = eventstore.Any
		case b.bug == BugUnfencedWorkers && cat == domain.StreamExecution && as[i].Events[0].Owner == domain.OwnerWorker:
			as[i].Expected = eventstore.Any
		case b.bug == BugTickTwice:
			b.tickElsewhere(&as[i])
		}
	}
	return b.Store.AppendMulti(ctx, as...)
}
