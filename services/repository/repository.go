// Package repository loads aggregates from the log and appends the events
// their commands decide, with the stream's version as the optimistic lock:
// when another writer got there first, it reloads and decides again.
package repository

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
)

// namespace seeds deterministic event ids: retrying the same decision gives
// the same id, so the store's idempotency makes the retry harmless.
var namespace = uuid.MustParse("6a0b5a8e-2f4e-4b7e-9a53-3c1f3f1f7a11")

// EventID returns the deterministic id of the event that writer decides to
// write to stream at version, of type typ. Two writers racing for the same
// version get different ids, so the loser sees a wrong-version error. On an
// execution stream named by a UUIDv7 the id is made local in time
// (domain.LocalEventID).
func EventID(writer, stream string, version int64, typ string) uuid.UUID {
	// The bytes of fmt's "%s/%s/%d/%s", without fmt: ids must never change.
	var buf [128]byte
	b := append(append(append(buf[:0], writer...), '/'), stream...)
	b = strconv.AppendInt(append(b, '/'), version, 10)
	return domain.LocalEventID(domain.DeriveID(namespace, append(append(b, '/'), typ...)), stream)
}

// LostRace reports whether an append error means another writer got to the
// stream first (the caller should reload and decide again).
func LostRace(err error) bool {
	return errors.Is(err, eventstore.ErrWrongExpectedVersion) || errors.Is(err, eventstore.ErrIdempotencyConflict)
}

// storeFailure marks an error returned by a store call, as opposed to a
// decision's refusal.
type storeFailure struct{ err error }

func (f *storeFailure) Error() string { return f.err.Error() }
func (f *storeFailure) Unwrap() error { return f.err }

// Unavailable reports whether err is a store call's failure that says
// nothing about the log (a timeout, an overloaded or unreachable backend),
// not a refusal (a lost race, a decision's error, a closed store, invalid
// input). The outcome of such a write is unknown: it may have landed.
// Trying the same decision again on the same state is safe, because its
// event ids are derived from the writer, stream, version and type, so the
// store treats a write that did land as an idempotent re-append.
func Unavailable(err error) bool {
	if err == nil {
		return false // the common case, without errors.As's allocation
	}
	var f *storeFailure
	if !errors.As(err, &f) || LostRace(err) {
		return false
	}
	for _, permanent := range []error{eventstore.ErrClosed, eventstore.ErrInvalidEvent, eventstore.ErrInvalidStream,
		eventstore.ErrEventTooLarge, eventstore.ErrCorrupt, eventstore.ErrLocked, eventstore.ErrNotOurs, context.Canceled} {
		if errors.Is(err, permanent) {
			return false
		}
	}
	return true
}

// Expected returns the expected version for appending after version v (-1: none).
func Expected(v int64) eventstore.ExpectedVersion {
	if v < 0 {
		return eventstore.NoStream
	}
	return eventstore.Exact(uint64(v))
}

// Fold reads stream from the start and calls apply for each decoded event.
// found is false when the stream does not exist.
func Fold(ctx context.Context, store eventstore.Store, stream string, apply func(env *domain.Envelope, ev domain.Event)) (found bool, err error) {
	found = true
	err = readStream(ctx, store, stream, 0, func(env *domain.Envelope) error {
		ev, err := codec.Events.Decode(env)
		if err != nil {
			return err
		}
		apply(env, ev)
		return nil
	})
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return false, nil
	}
	return found, err
}

// readStream calls each for every event of stream from version from on, in pages.
// A missing stream gives an error wrapping eventstore.ErrStreamNotFound; a
// failed read, a storeFailure.
func readStream(ctx context.Context, store eventstore.Store, stream string, from uint64, each func(env *domain.Envelope) error) error {
	for {
		evs, err := store.ReadStream(ctx, stream, from, 1000)
		if errors.Is(err, eventstore.ErrStreamNotFound) {
			return err
		}
		if err != nil {
			return &storeFailure{fmt.Errorf("read %s: %w", stream, err)}
		}
		for i := range evs {
			if err := each(&evs[i]); err != nil {
				return err
			}
		}
		if len(evs) < 1000 {
			return nil
		}
		from = evs[len(evs)-1].Version + 1
	}
}

// LoadExecution folds execution id's stream. A missing stream gives an
// error wrapping domain.ErrNotFound.
func LoadExecution(ctx context.Context, store eventstore.Store, id string) (*domain.Execution, error) {
	return LoadExecutionFrom(ctx, store, nil, id)
}

// LoadExecutionFrom is LoadExecution with bases (FoldFromBase).
func LoadExecutionFrom(ctx context.Context, store eventstore.Store, bases *Bases, id string) (*domain.Execution, error) {
	x := domain.NewExecution(id)
	found, err := FoldFromBase(ctx, store, bases, domain.ExecutionStream(id), executionBase(id, &x), func(env *domain.Envelope, ev domain.Event) { x.Apply(ev, env.Version, env.Time) })
	if err != nil {
		return nil, fmt.Errorf("load execution %s: %w", id, err)
	}
	if !found {
		return nil, fmt.Errorf("execution %s: %w", id, domain.ErrNotFound)
	}
	return x, nil
}

// Decide decides, on the current state of an execution, the event to
// append (nil: nothing to do).
type Decide func(x *domain.Execution) (domain.Event, error)

// MaxRetries bounds how often UpdateExecution reloads after losing a race.
const MaxRetries = 20

// UpdateExecution appends the event decide returns for execution id, written
// by owner/writer, at the execution's current version. known, if not nil, is
// a state the caller already holds (it is used for the first try). When
// another writer appended first, it reloads and decides again; a decision's
// error (such as a handoff-rule refusal) is returned as is. It returns the
// state after the append (or the state on which nothing was to do).
func UpdateExecution(ctx context.Context, store eventstore.Store, id string, owner domain.Owner, writer string,
	known *domain.Execution, decide Decide) (*domain.Execution, error) {
	return UpdateExecutionGuarded(ctx, store, id, owner, writer, known, nil, decide)
}

// A Guard gives the condition an append must meet besides its own stream's
// version: another stream at a version (a StreamAppend without events),
// checked in the same atomic append; the zero StreamAppend for none. An
// error refuses the append and is returned as is. fresh is true when the
// condition the guard gave last failed: it must read its stream again.
type Guard func(ctx context.Context, fresh bool) (eventstore.StreamAppend, error)

// UpdateExecutionGuarded is UpdateExecution with guard's condition in every
// append it tries (guard nil: none). When the condition fails it asks guard
// again (fresh) and decides again on the execution's state it has.
func UpdateExecutionGuarded(ctx context.Context, store eventstore.Store, id string, owner domain.Owner, writer string,
	known *domain.Execution, guard Guard, decide Decide) (*domain.Execution, error) {
	x := known
	stream := domain.ExecutionStream(id)
	fresh := false
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
		var cond eventstore.StreamAppend
		if guard != nil {
			if cond, err = guard(ctx, fresh); err != nil {
				return x, err
			}
		}
		env, err := codec.Events.Encode(EventID(writer, stream, x.Version()+1, ev.EventType()), ev, owner, writer)
		if err != nil {
			return x, err
		}
		env.Metadata = domain.PrincipalMetadata(PrincipalFrom(ctx))
		_ = codec.Events.Remember(&env) // for this process's folds (it encodes, so it decodes)
		var res eventstore.AppendResult
		if cond.Stream == "" {
			res, err = store.Append(ctx, stream, Expected(x.Version()), env)
		} else {
			res, err = store.AppendMulti(ctx, eventstore.StreamAppend{Stream: stream, Expected: Expected(x.Version()), Events: []domain.Envelope{env}}, cond)
		}
		if err == nil {
			x.Apply(ev, res.Version, time.Time{}) // the commit time is not read back: callers use the state for versions only
			return x, nil
		}
		if !LostRace(err) || attempt >= MaxRetries {
			return x, &storeFailure{fmt.Errorf("append %s to %s: %w", ev.EventType(), stream, err)}
		}
		var wv *eventstore.WrongVersionError
		if fresh = cond.Stream != "" && errors.As(err, &wv) && wv.Stream == cond.Stream; !fresh {
			x = nil // lost a race: reload and decide again
		}
	}
}

// LoadWorker folds worker id's stream (an unregistered Worker if it is
// empty). An event that does not decode is passed over, as the executor's
// fold passes it over, but its version counts: the state's version is the
// stream's, so an append after it expects the right one.
func LoadWorker(ctx context.Context, store eventstore.Store, id string) (*domain.Worker, error) {
	return catchUpWorker(ctx, store, domain.NewWorker(id))
}

// CatchUpWorker returns known (a state of worker stream, which it does not
// change) brought up to the stream's end: only the events after known's
// version are read. A nil known loads the whole stream. When the first event
// the live log holds past known is not the next one (those between were
// archived by a trim), it starts from the worker as the newest checkpoint
// holds it instead of applying over the gap.
//
// A caller that knows the stream has moved past known (an append at its
// version lost a race) uses RefreshWorker: the events past known may all
// have been archived, leaving nothing to read here.
func CatchUpWorker(ctx context.Context, store eventstore.Store, id string, known *domain.Worker) (*domain.Worker, error) {
	if known == nil {
		return LoadWorker(ctx, store, id)
	}
	return catchUpWorker(ctx, store, known.Clone())
}

// RefreshWorker is CatchUpWorker after a lost race: when the live log holds
// nothing past known, the events after it were archived, and the worker is
// loaded anew (from the newest checkpoint).
func RefreshWorker(ctx context.Context, store eventstore.Store, id string, known *domain.Worker) (*domain.Worker, error) {
	w, err := CatchUpWorker(ctx, store, id, known)
	if err != nil || known == nil || w.Version() > known.Version() {
		return w, err
	}
	return LoadWorker(ctx, store, id)
}

func catchUpWorker(ctx context.Context, store eventstore.Store, w *domain.Worker) (*domain.Worker, error) {
	id := w.ID()
	seeded, first := w.Version() >= 0, true
	err := readStream(ctx, store, domain.WorkerStream(id), uint64(w.Version()+1), func(env *domain.Envelope) error {
		gap := first && int64(env.Version) > w.Version()+1 // its events before it were archived (trimmed.go)
		first, seeded = false, true
		if gap {
			b, err := workerBase(ctx, store, id)
			if err != nil {
				return &storeFailure{err}
			}
			if b != nil && b.Version() > w.Version() {
				w = b
			}
		}
		if int64(env.Version) <= w.Version() {
			return nil
		}
		ev, err := codec.Events.Decode(env)
		if err != nil {
			ev = nil // passed over: Apply only takes its version
		}
		w.Apply(ev, env.Version, env.Time)
		return nil
	})
	if err == nil && !seeded { // a kept stream with no event in the live log
		b, berr := workerBase(ctx, store, id)
		if berr != nil {
			err = &storeFailure{berr}
		} else if b != nil {
			w = b
		}
	}
	if err != nil && !errors.Is(err, eventstore.ErrStreamNotFound) {
		return nil, fmt.Errorf("load worker %s: %w", id, err)
	}
	return w, nil
}

// UpdateWorker appends the event decide returns for worker id, written by
// owner/writer, at the stream's current version, reloading after a lost race.
// known, if not nil, is used for the first try.
func UpdateWorker(ctx context.Context, store eventstore.Store, id string, owner domain.Owner, writer string,
	known *domain.Worker, decide func(w *domain.Worker) (domain.Event, error)) (*domain.Worker, error) {
	w := known
	stream := domain.WorkerStream(id)
	for attempt := 0; ; attempt++ {
		if w == nil {
			var err error
			if w, err = LoadWorker(ctx, store, id); err != nil {
				return nil, err
			}
		}
		ev, err := decide(w)
		if err != nil || ev == nil {
			return w, err
		}
		env, err := codec.Events.Encode(EventID(writer, stream, w.Version()+1, ev.EventType()), ev, owner, writer)
		if err != nil {
			return w, err
		}
		_ = codec.Events.Remember(&env)
		res, err := store.Append(ctx, stream, Expected(w.Version()), env)
		if err == nil {
			w.Apply(ev, res.Version, time.Time{})
			return w, nil
		}
		if !LostRace(err) || attempt >= MaxRetries {
			return w, &storeFailure{fmt.Errorf("append %s to %s: %w", ev.EventType(), stream, err)}
		}
		if w, err = RefreshWorker(ctx, store, id, w); err != nil { // another writer got there first: read what it wrote
			return nil, err
		}
	}
}
