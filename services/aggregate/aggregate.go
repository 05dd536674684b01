// Package aggregate loads aggregates from the log and appends the events
// their commands decide, with the stream's version as the optimistic lock:
// when another writer got there first, it reloads and decides again.
package aggregate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// namespace seeds deterministic event ids: retrying the same decision gives
// the same id, so the store's idempotency makes the retry harmless.
var namespace = uuid.MustParse("6a0b5a8e-2f4e-4b7e-9a53-3c1f3f1f7a11")

// EventID returns the deterministic id of the event that a decision writes
// to stream at version (its expected position), of type typ.
func EventID(stream string, version int64, typ string) uuid.UUID {
	return uuid.NewSHA1(namespace, fmt.Appendf(nil, "%s/%d/%s", stream, version, typ))
}

// Expected returns the expected version for appending after version v (-1: none).
func Expected(v int64) eventstore.ExpectedVersion {
	if v < 0 {
		return eventstore.NoStream
	}
	return eventstore.Exact(uint64(v))
}

// LoadExecution folds execution id's stream. A missing stream gives an
// error wrapping domain.ErrNotFound.
func LoadExecution(ctx context.Context, store eventstore.Store, id string) (*domain.Execution, error) {
	x := domain.NewExecution(id)
	stream := domain.ExecutionStream(id)
	from := uint64(0)
	for {
		evs, err := store.ReadStream(ctx, stream, from, 1000)
		if errors.Is(err, eventstore.ErrStreamNotFound) {
			return nil, fmt.Errorf("execution %s: %w", id, domain.ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("load execution %s: %w", id, err)
		}
		for i := range evs {
			ev, err := domain.Catalogue.Decode(&evs[i])
			if err != nil {
				return nil, err
			}
			x.Apply(ev, evs[i].Version, evs[i].Time)
		}
		if len(evs) < 1000 {
			return x, nil
		}
		from = evs[len(evs)-1].Version + 1
	}
}

// Decision decides, on the current state of an execution, the event to
// append (nil: nothing to do).
type Decision func(x *domain.Execution) (domain.Event, error)

// MaxRetries bounds how often UpdateExecution reloads after losing a race.
const MaxRetries = 20

// UpdateExecution appends the event decide returns for execution id, written
// by owner/writer, at the execution's current version. known, if not nil, is
// a state the caller already holds (it is used for the first try). When
// another writer appended first, it reloads and decides again; a decision's
// error (such as a handoff-rule refusal) is returned as is. It returns the
// state after the append (or the state on which nothing was to do).
func UpdateExecution(ctx context.Context, store eventstore.Store, id string, owner domain.Owner, writer string,
	known *domain.Execution, decide Decision) (*domain.Execution, error) {
	x := known
	stream := domain.ExecutionStream(id)
	for attempt := 0; ; attempt++ {
		if x == nil {
			var err error
			if x, err = LoadExecution(ctx, store, id); err != nil {
				return nil, err
			}
		}
		ev, err := decide(x)
		if err != nil || ev == nil {
			return x, err
		}
		env, err := domain.Catalogue.Encode(EventID(stream, x.Version()+1, ev.EventType()), ev, owner, writer)
		if err != nil {
			return x, err
		}
		res, err := store.Append(ctx, stream, Expected(x.Version()), env)
		if err == nil {
			x.Apply(ev, res.Version, time.Time{}) // the commit time is not read back: callers use the state for versions only
			return x, nil
		}
		if !errors.Is(err, eventstore.ErrWrongExpectedVersion) || attempt >= MaxRetries {
			return x, fmt.Errorf("append %s to %s: %w", ev.EventType(), stream, err)
		}
		x = nil // lost a race: reload and decide again
	}
}
