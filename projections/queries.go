// The query façade: every read the API answers, from the live read model
// or from the log, behind one type, so a reader needs no store.
package projections

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
)

// Queries answers reads: from the live Views (folded by their owner, see
// Views.Run), or, for what the Views do not hold (an as_of point, a page of
// the log, an action as its stream holds it), from the log. Errors match
// the sentinels of errors.go.
type Queries struct {
	views   *Views
	store   eventstore.Store
	history eventstore.Store // archive + live log (archive.History); nil without an archive
}

// NewQueries returns the façade over views, which follow store.
func NewQueries(views *Views, store eventstore.Store) *Queries {
	return &Queries{views: views, store: store}
}

// WithArchive makes q answer what the live log no longer holds from
// history, which reads the archive and the live log as one log
// (archive.History): an execution the read model does not know is folded
// from it and shown with Archived set, and as_of folds read it. It returns q.
func (q *Queries) WithArchive(history eventstore.Store) *Queries {
	q.history = history
	return q
}

// past returns the log to fold history from: archive + live log when q has
// an archive, else the live log.
func (q *Queries) past() eventstore.Store {
	if q.history != nil {
		return q.history
	}
	return q.store
}

// Views returns the live read model as folded now.
func (q *Queries) Views() *Views { return q.views }

// CaughtUp returns the live read model once it holds everything the log
// held when CaughtUp was called (waiting at most readYourWrites): a read
// that follows a write sees it.
func (q *Queries) CaughtUp(ctx context.Context) *Views {
	q.views.AwaitHead(ctx, q.store)
	return q.views
}

// readYourWrites bounds how long a read waits for the views to fold what
// the log held when it was asked.
const readYourWrites = 2 * time.Second

// AwaitHead waits (at most two seconds, or until ctx ends) until v has
// applied everything store held when it was called.
func (v *Views) AwaitHead(ctx context.Context, store eventstore.Store) {
	head, err := store.Head(ctx)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, readYourWrites)
	defer cancel()
	for {
		ch := v.Changed()
		if v.Next() >= head {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// At returns the caught-up live views when asOf is "", else a fold of the
// log up to asOf (a log position or an RFC 3339 time; anything else is
// ErrInvalidQuery), an audit query: from the newest checkpoint of the live
// log at or before asOf (so it answers past the live log's start without
// an archive), else from position 0 (ErrArchived before the live log's
// start without an archive).
func (q *Queries) At(ctx context.Context, asOf string) (*Views, error) {
	if asOf == "" {
		return q.CaughtUp(ctx), nil
	}
	cut, err := parseCut(asOf)
	if err != nil {
		return nil, err
	}
	v, err := viewsAsOf(ctx, q.store, q.past(), cut)
	return v, storeError(err)
}

func parseCut(asOf string) (Cut, error) {
	cut, err := ParseCut(asOf)
	if err != nil {
		return Cut{}, &classified{err: err, kind: ErrInvalidQuery}
	}
	return cut, nil
}

// Execution returns an execution's current state: from the views (caught up
// with the log first if they do not know it yet), or, for an ended execution
// the views have forgotten (Views.Retain), folded from its stream. found is
// false when the log has no such execution.
func (q *Queries) Execution(ctx context.Context, id string) (view ExecutionView, found bool, err error) {
	v, ok := q.views.View(id)
	if !ok {
		q.views.AwaitHead(ctx, q.store)
		v, ok = q.views.View(id)
	}
	if !ok && q.views.Retention() > 0 {
		v, ok, err = ExecutionAsOf(ctx, q.store, id, Cut{Position: math.MaxUint64})
		if err != nil && !eventstoreNotFound(err) {
			return ExecutionView{}, false, storeError(err)
		}
	}
	if !ok && q.history != nil {
		v, ok, err = ExecutionAsOf(ctx, q.history, id, Cut{Position: math.MaxUint64})
		if err != nil && !eventstoreNotFound(err) {
			return ExecutionView{}, false, storeError(err)
		}
		v.Archived = ok
	}
	return v, ok, nil
}

// ExecutionAt returns an execution's state as of asOf (see At), folded from
// its stream (archive + live log with an archive). Without an archive, on a
// live log that starts after position 0, an execution live at the newest
// checkpoint at or before asOf starts from its state there
// (executionAsOfTrimmed), and an asOf before the live log's first usable
// checkpoint is ErrArchived. found is false when it had not been requested
// by then (or, without an archive, ended before the live log's start).
func (q *Queries) ExecutionAt(ctx context.Context, id, asOf string) (view ExecutionView, found bool, err error) {
	cut, err := parseCut(asOf)
	if err != nil {
		return ExecutionView{}, false, err
	}
	fold := ExecutionAsOf
	if t, ok := q.store.(eventstore.Trimmer); ok && q.history == nil {
		first, _, err := t.Start(ctx)
		if err != nil {
			return ExecutionView{}, false, storeError(err)
		}
		if first > 0 {
			fold = func(ctx context.Context, store eventstore.Store, id string, cut Cut) (ExecutionView, bool, error) {
				return executionAsOfTrimmed(ctx, store, id, cut, first)
			}
		}
	}
	v, found, err := fold(ctx, q.past(), id, cut)
	if eventstoreNotFound(err) {
		return ExecutionView{}, false, nil
	}
	return v, found, storeError(err)
}

func eventstoreNotFound(err error) bool { return errors.Is(err, eventstore.ErrStreamNotFound) }

// ActionFromLog returns an action as its stream holds it now (the views may
// not have folded a change that was just acknowledged). found is false for
// an action that is not defined.
func (q *Queries) ActionFromLog(ctx context.Context, ref string) (view ActionView, found bool, err error) {
	a := domain.NewAction()
	stream := domain.ActionStream(ref)
	for from := uint64(0); ; {
		batch, err := q.store.ReadStream(ctx, stream, from, 1000)
		if eventstoreNotFound(err) {
			return ActionView{}, false, nil
		}
		if err != nil {
			return ActionView{}, false, storeError(err)
		}
		for i := range batch {
			ev, err := codec.Events.Decode(&batch[i])
			if err != nil {
				return ActionView{}, false, err
			}
			a.Apply(ev, batch[i].Version)
		}
		if len(batch) < 1000 {
			break
		}
		from += uint64(len(batch))
	}
	if !a.Defined() {
		return ActionView{}, false, nil
	}
	return ActionView{Policy: a.Policy(), Paused: a.Paused(), Version: a.Version(), Served: q.views.Served(a.Policy().Runner)}, true, nil
}

// EventPage is a page of the log or of one stream, and where the next page
// starts (a position for the log, a version for a stream).
type EventPage struct {
	Events []domain.Envelope
	Next   uint64
}

// Events returns up to limit events of the whole log from position from
// on, and at most about DefaultPageBytes of them (at least one event):
// Next says where the rest begins.
func (q *Queries) Events(ctx context.Context, from uint64, limit int) (EventPage, error) {
	evs, err := readPage(limit, func(n int) ([]domain.Envelope, error) { return q.store.ReadAll(ctx, from, n) },
		func(last *domain.Envelope) { from = last.Position + 1 })
	if err != nil {
		return EventPage{}, storeError(err)
	}
	return EventPage{Events: evs, Next: from}, nil
}

// Stream returns up to limit events of one stream from version from on,
// within the byte budget Events keeps. A stream that does not exist is
// ErrUnknownStream.
func (q *Queries) Stream(ctx context.Context, stream string, from uint64, limit int) (EventPage, error) {
	evs, err := readPage(limit, func(n int) ([]domain.Envelope, error) { return q.store.ReadStream(ctx, stream, from, n) },
		func(last *domain.Envelope) { from = last.Version + 1 })
	if err != nil {
		return EventPage{}, storeError(err)
	}
	return EventPage{Events: evs, Next: from}, nil
}

// readPage reads a page of up to limit events in chunks (read reads n
// events from where the chunk before ended; moved is told the page's last
// event after each chunk) and ends it before the event that would take
// its events past DefaultPageBytes (never before its first). A chunk is
// sized on the events read so far, so that a page of large events reads a
// few events past its end at most, never a thousand.
func readPage(limit int, read func(n int) ([]domain.Envelope, error), moved func(last *domain.Envelope)) ([]domain.Envelope, error) {
	out := []domain.Envelope{}
	used, chunk := 0, 8
	for len(out) < limit {
		ask := min(chunk, limit-len(out))
		evs, err := read(ask)
		if err != nil {
			return nil, err
		}
		for i := range evs {
			size := eventSize(&evs[i])
			if len(out) > 0 && used+size > DefaultPageBytes {
				moved(&out[len(out)-1])
				return out, nil
			}
			out, used = append(out, evs[i]), used+size
		}
		if len(evs) > 0 {
			moved(&out[len(out)-1])
		}
		if len(evs) < ask || used >= DefaultPageBytes {
			break
		}
		chunk = (DefaultPageBytes-used)/max(used/len(out), 1) + 1
	}
	return out, nil
}

// eventSize is about the bytes of e's JSON in a page.
func eventSize(e *domain.Envelope) int { return 256 + len(e.Data) + len(e.Metadata) }

// Head returns the position the next event committed to the log will take.
func (q *Queries) Head(ctx context.Context) (uint64, error) {
	head, err := q.store.Head(ctx)
	return head, storeError(err)
}

// Lag returns where the live views stand, the log's head, and how many
// events lie between them.
func (q *Queries) Lag(ctx context.Context) (next, head, lag uint64, err error) {
	head, err = q.Head(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	next = q.views.Next()
	if head > next {
		lag = head - next
	}
	return next, head, lag, nil
}

// Rebuild is the answer of a rebuild check.
type Rebuild struct {
	Position    uint64   // where both folds stood when compared
	Differences []string // empty: the incremental fold equals the rebuild
}

// Rebuild folds the log from position 0 up to where the live views are now
// and compares (at most maxDiffs differences): any difference is a bug in
// the incremental fold.
func (q *Queries) Rebuild(ctx context.Context, maxDiffs int) (Rebuild, error) {
	live := q.views
	if live.Next() == 0 {
		return Rebuild{Differences: []string{}}, nil
	}
	fresh := NewViews()
	fresh.Retain(live.Retention()) // the same executions forgotten, so the same kept
	// The live views go on folding meanwhile: bring the fresh fold to where
	// they are and compare when both stand at the same position.
	for {
		if err := fresh.CatchUpTo(ctx, q.store, live.Next()); err != nil {
			return Rebuild{}, storeError(err)
		}
		if diffs, ok := CompareAt(live, fresh, maxDiffs); ok {
			if diffs == nil {
				diffs = []string{}
			}
			return Rebuild{Position: fresh.Next(), Differences: diffs}, nil
		}
		if err := ctx.Err(); err != nil {
			return Rebuild{}, err
		}
	}
}

// FollowBatch is the most events FollowEvents holds for one follower at a
// time: what a follower that stops reading keeps in memory is bounded by
// it, however far behind the log's head it is.
const FollowBatch = 256

// FollowEvents calls fn with every event of the log from position from on,
// in log order, catching up then live, until ctx ends or fn fails. With
// action set, only the events of that action pass: its action and queue
// streams and the streams of its executions (as the views know them once
// they have folded the event). It reads at most FollowBatch events at a
// time, and only below the views' position (a prefix of the log the views
// read through a gap-free subscription), waking when the views advance.
// While the log cannot be read it tries again with a growing pause, and
// never skips an event.
func (q *Queries) FollowEvents(ctx context.Context, from uint64, action string, fn func(env *domain.Envelope) error) error {
	pause := 100 * time.Millisecond
	for {
		changed := q.views.Changed()
		target := q.views.Next()
		for from < target {
			batch, err := q.store.ReadAll(ctx, from, FollowBatch)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				if errors.Is(err, eventstore.ErrClosed) {
					return storeError(err)
				}
				select { // an outage: the follower waits, then resumes where it was
				case <-ctx.Done():
					return nil
				case <-time.After(pause):
				}
				pause = min(2*pause, 5*time.Second)
				continue
			}
			pause = 100 * time.Millisecond
			if len(batch) == 0 {
				break
			}
			for i := range batch {
				env := &batch[i]
				if env.Position >= target {
					from = target // nothing else below target: the views are past it
					break
				}
				from = env.Position + 1
				if action != "" && !q.ofAction(ctx, env, action) {
					continue
				}
				if err := fn(env); err != nil {
					return err
				}
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}

// ofAction reports whether env belongs to action ref.
func (q *Queries) ofAction(ctx context.Context, env *domain.Envelope, ref string) bool {
	cat, id := domain.SplitStream(env.Stream)
	switch cat {
	case domain.StreamAction, domain.StreamQueue:
		return id == ref
	case domain.StreamExecution:
		for q.views.Next() <= env.Position {
			changed := q.views.Changed()
			if q.views.Next() > env.Position {
				break
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return false
			}
		}
		v, ok := q.views.View(id)
		return ok && v.Action == ref
	}
	return false
}
