// Streams whose start was archived (docs/checkpoints.md): after a trim
// the live log holds a kept stream (a queue, an action, a live execution, a
// worker, a schedule) only from its first event at the live log's start on,
// so folding it from its first live event would miss its beginning. Such a
// stream's aggregate starts from the newest checkpoint the live log holds
// (the fold of everything before it), and its events at or below the
// aggregate's version there are passed over.

package repository

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/projections"
)

// ErrNoBase says a stream's start is no longer in the live log and no
// checkpoint there holds it.
var ErrNoBase = errors.New("the stream's start was archived and no checkpoint in the live log holds it")

// FoldFromBase folds stream like Fold. When the live log no longer holds
// the stream's first event, base is called first, with the state of the
// newest checkpoint of the live log, and returns the aggregate's version in
// it (-1: the checkpoint does not hold it): the stream's events at or below
// that version are then passed over. A nil base folds what the live log
// holds.
//
// bases, if not nil, keeps the checkpoint's state decoded between calls.
func FoldFromBase(ctx context.Context, store eventstore.Store, bases *Bases, stream string, base func(st *projections.State) int64,
	apply func(env *domain.Envelope, ev domain.Event)) (found bool, err error) {
	skip, seeded := int64(-1), false
	seed := func() error {
		seeded = true
		if base == nil {
			return nil
		}
		st, err := bases.state(ctx, store)
		if err != nil {
			return &storeFailure{err}
		}
		if st == nil {
			return fmt.Errorf("%s: %w", stream, ErrNoBase)
		}
		skip = base(st)
		return nil
	}
	err = readStream(ctx, store, stream, 0, func(env *domain.Envelope) error {
		if !seeded && env.Version > 0 {
			if err := seed(); err != nil {
				return err
			}
		}
		seeded = true
		if int64(env.Version) <= skip {
			return nil
		}
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
	if err == nil && !seeded { // a kept stream with no event in the live log
		err = seed()
	}
	return err == nil, err
}

// Bases keeps the state of the newest checkpoint of one store's live log,
// decoded once per live log start, for the folds of streams whose start was
// archived. The zero value is ready; a nil *Bases keeps nothing (each fold
// reads the checkpoint). Safe for concurrent use; use one per store.
type Bases struct {
	mu    sync.Mutex
	first uint64 // the live log's start it was read for
	st    *projections.State
}

// state returns the state of the newest checkpoint at or after the live
// log's start (nil: none). The state is shared: callers copy what they take
// from it.
func (b *Bases) state(ctx context.Context, store eventstore.Store) (*projections.State, error) {
	t, ok := store.(eventstore.Trimmer)
	if !ok {
		return nil, nil
	}
	first, _, err := t.Start(ctx)
	if err != nil || first == 0 {
		return nil, err
	}
	if b != nil {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.st != nil && b.first == first {
			return b.st, nil
		}
	}
	sn, _, ok, err := projections.LatestCheckpoint(ctx, store, first, nil)
	if err != nil || !ok {
		return nil, err
	}
	st := projections.RestoreState(sn)
	if b != nil {
		b.first, b.st = first, st
	}
	return st, nil
}

// executionBase is LoadExecution's base: a copy of the execution as the
// checkpoint holds it.
func executionBase(id string, x **domain.Execution) func(st *projections.State) int64 {
	return func(st *projections.State) int64 {
		y := st.Execution(id)
		if y == nil {
			return -1
		}
		*x = domain.RestoreExecution(y.Snapshot())
		return (*x).Version()
	}
}

// workerBase returns a copy of worker id as the newest checkpoint of
// store's live log holds it, or nil when the live log holds the worker's
// stream from its start (or no checkpoint holds the worker).
func workerBase(ctx context.Context, store eventstore.Store, id string) (*domain.Worker, error) {
	st, err := (*Bases)(nil).state(ctx, store)
	if err != nil || st == nil {
		return nil, err
	}
	w := st.Workers[id]
	if w == nil {
		return nil, nil
	}
	return w.Worker.Clone(), nil
}
