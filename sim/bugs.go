// The planted bugs the simulation must catch (Config.Bug): stores and folds
// that break one rule each, so TestCatchesBugs can prove the checks fail.

package sim

import (
	"context"
	"slices"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
)

// rewrite replaces the data of every event in evs whose type is one of
// types with change's version of it: what an executor whose fold misreads
// one field would see. An event that does not decode, that change leaves
// alone (false), or whose new version does not encode keeps its data.
func rewrite(evs []domain.Envelope, change func(domain.Event) (domain.Event, bool), types ...string) {
	for i := range evs {
		env := &evs[i]
		if !slices.Contains(types, env.Type) {
			continue
		}
		ev, err := codec.Events.Decode(env)
		if err != nil {
			continue
		}
		if ev, ok := change(ev); ok {
			if re, err := codec.Events.Encode(env.ID, ev, env.Owner, env.Writer); err == nil {
				env.Data = re.Data
			}
		}
	}
}

// overGrant rewrites the policies in evs with max_concurrent one higher:
// what an executor with an off-by-one limit would decide on.
func overGrant(evs []domain.Envelope) {
	rewrite(evs, func(ev domain.Event) (domain.Event, bool) {
		switch e := ev.(type) {
		case domain.ActionDefined:
			e.Policy.MaxConcurrent++
			return e, true
		case domain.ActionPolicyChanged:
			e.Policy.MaxConcurrent++
			return e, true
		}
		return ev, false
	}, domain.TypeActionDefined, domain.TypeActionPolicyChanged)
}

// noTotal rewrites the policies in evs without max_concurrent_total
// (BugIgnoreTotal).
func noTotal(evs []domain.Envelope) {
	rewrite(evs, func(ev domain.Event) (domain.Event, bool) {
		switch e := ev.(type) {
		case domain.ActionDefined:
			e.Policy.MaxConcurrentTotal = 0
			return e, true
		case domain.ActionPolicyChanged:
			e.Policy.MaxConcurrentTotal = 0
			return e, true
		}
		return ev, false
	}, domain.TypeActionDefined, domain.TypeActionPolicyChanged)
}

// noBackoff rewrites every execution.retry_scheduled in evs with no
// backoff (BugEarlyRequeue).
func noBackoff(evs []domain.Envelope) {
	rewrite(evs, func(ev domain.Event) (domain.Event, bool) {
		e, ok := ev.(domain.ExecutionRetryScheduled)
		if !ok {
			return ev, false
		}
		e.BackoffMillis = 0
		return e, true
	}, domain.TypeExecutionRetryScheduled)
}

// noPriority rewrites every request and requeue in evs with the default
// priority (BugIgnorePriority).
func noPriority(evs []domain.Envelope) {
	rewrite(evs, func(ev domain.Event) (domain.Event, bool) {
		switch e := ev.(type) {
		case domain.ExecutionRequested:
			e.Priority = 0
			return e, true
		case domain.ExecutionRequeued:
			e.Priority = 0
			return e, true
		}
		return ev, false
	}, domain.TypeExecutionRequested, domain.TypeExecutionRequeued)
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
