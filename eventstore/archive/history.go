package archive

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// ErrReadOnly is returned by History's appends: history is read, the live
// log is written.
var ErrReadOnly = fmt.Errorf("archive.History is read-only: append to the live log: %w", errors.ErrUnsupported)

// History reads the archive and the live log as one log: every position
// once, in position order. Positions below the live log's start
// (eventstore.Trimmer's Start; 0 for a store that does not trim) come from
// the archive; from the archive's end on, from the live log. A position in
// both (the archive was written and the live log not trimmed yet) is read
// from the archive, once. A gap between the archive's end and the live log's
// start is an *eventstore.TrimmedError, never silently skipped.
//
// History is an eventstore.Store for readers (replay, audit, a fold of one
// stream): Append and AppendMulti fail with ErrReadOnly, Head is the live
// log's, Close closes neither the archive nor the live log.
//
// It serves nothing from an archive segment that does not verify (the
// Archive's reads check each segment before its first read), unless it is
// the view Unverified returns.
type History struct {
	Archive *Archive
	Live    eventstore.Store

	unverified bool
}

var _ eventstore.Store = History{}

// Unverified returns h reading the archive's segments without verifying
// them first: for a reader that checks the hash chain itself and reports
// damage at its position (the audit), where h would fail the read.
func (h History) Unverified() eventstore.Store {
	h.unverified = true
	return h
}

// KeepsChain implements eventstore.ChainReporter: true when the live log
// keeps the chain (archived events always carry their hashes).
func (h History) KeepsChain() bool { return eventstore.KeepsChain(h.Live) }

// liveStart returns the live log's first position.
func (h History) liveStart(ctx context.Context) (uint64, error) {
	t, ok := h.Live.(eventstore.Trimmer)
	if !ok {
		return 0, nil
	}
	first, _, err := t.Start(ctx)
	return first, err
}

// ReadAll returns up to limit events of the whole history from position
// from (inclusive), in position order.
func (h History) ReadAll(ctx context.Context, from uint64, limit int) ([]domain.Envelope, error) {
	for attempt := 0; ; attempt++ {
		evs, err := h.readAll(ctx, from, limit)
		if !errors.Is(err, eventstore.ErrTrimmed) || attempt > 0 {
			return evs, err
		}
		// The live log was trimmed since: the archive has grown (in
		// this process, or in another one that Refresh sees).
		if err := h.Archive.Refresh(); err != nil {
			return nil, err
		}
	}
}

func (h History) readAll(ctx context.Context, from uint64, limit int) ([]domain.Envelope, error) {
	first, end := h.Archive.First(), h.Archive.End()
	if from < end {
		if from < first {
			return nil, &eventstore.TrimmedError{From: from, First: first}
		}
		return h.Archive.read(ctx, from, limit, !h.unverified)
	}
	start, err := h.liveStart(ctx)
	if err != nil {
		return nil, err
	}
	if from < start {
		return nil, &eventstore.TrimmedError{From: from, First: start}
	}
	return h.Live.ReadAll(ctx, from, limit)
}

// ReadStream returns up to limit events of stream from version from: its
// archived events, then its live ones. A stream in neither is
// eventstore.ErrStreamNotFound.
func (h History) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]domain.Envelope, error) {
	if err := h.Fresh(ctx); err != nil {
		return nil, err
	}
	archived, err := h.Archive.readStream(ctx, stream, !h.unverified)
	if err != nil {
		return nil, err
	}
	n := uint64(len(archived))
	var out []domain.Envelope
	if from < n {
		out = archived[from:min(n, from+uint64(limit))]
	}
	if len(out) == limit {
		return out, nil
	}
	live, err := h.Live.ReadStream(ctx, stream, max(from, n), limit-len(out))
	switch {
	case errors.Is(err, eventstore.ErrStreamNotFound) && n > 0:
		return out, nil
	case err != nil:
		return nil, err
	}
	for i := range live {
		if live[i].Version >= max(from, n) { // a stream kept by a trim reads from its first live event
			out = append(out, live[i])
		}
	}
	return out, nil
}

// Subscribe delivers the history's events at positions >= from that pass
// filter: the archived ones, then the live log's (catch-up, then live), with
// the promises of eventstore.Store. When the live log is trimmed under it,
// it continues from the archive.
func (h History) Subscribe(ctx context.Context, from uint64, filter eventstore.Filter, handle func([]domain.Envelope) error) error {
	for {
		for from < h.Archive.End() {
			evs, err := h.ReadAll(ctx, from, readBatch)
			if err != nil {
				return err
			}
			if len(evs) == 0 {
				break
			}
			from = evs[len(evs)-1].Position + 1
			kept := evs[:0]
			for i := range evs {
				if filter.Match(&evs[i]) {
					kept = append(kept, evs[i])
				}
			}
			if len(kept) > 0 {
				if err := handle(kept); err != nil {
					return err
				}
			}
		}
		next := from
		err := h.Live.Subscribe(ctx, from, filter, func(evs []domain.Envelope) error {
			next = evs[len(evs)-1].Position + 1
			return handle(evs)
		})
		if !errors.Is(err, eventstore.ErrTrimmed) {
			return err
		}
		if err := h.Archive.Refresh(); err != nil {
			return err
		}
		if h.Archive.End() <= next {
			return err // trimmed past what the archive holds: a gap
		}
		from = next
	}
}

// Fresh makes sure h.Archive has seen every segment the live log's trims
// rely on: when the live log starts past the archive's end (another
// Archive in this process or another process archived more since), it
// reads the directory again (Archive.Refresh).
func (h History) Fresh(ctx context.Context) error {
	start, err := h.liveStart(ctx)
	if err != nil || start <= h.Archive.End() {
		return err
	}
	return h.Archive.Refresh()
}

// FirstEvent returns stream's first event if the archive holds it, reading
// the segments from since on (Archive.FirstEvent) once the archive has seen
// every segment the live log's trims rely on (Fresh). The live log is the
// caller's to read first: a stream it holds from its start is not looked
// for here.
func (h History) FirstEvent(ctx context.Context, stream string, since time.Time) (*domain.Envelope, bool, error) {
	if err := h.Fresh(ctx); err != nil {
		return nil, false, err
	}
	return h.Archive.FirstEvent(ctx, stream, since)
}

// Head returns the live log's head.
func (h History) Head(ctx context.Context) (uint64, error) { return h.Live.Head(ctx) }

// Append fails with ErrReadOnly.
func (History) Append(context.Context, string, eventstore.ExpectedVersion, ...domain.Envelope) (eventstore.AppendResult, error) {
	return eventstore.AppendResult{}, ErrReadOnly
}

// AppendMulti fails with ErrReadOnly.
func (History) AppendMulti(context.Context, ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	return eventstore.AppendResult{}, ErrReadOnly
}

// Close does nothing: the archive and the live log are their opener's.
func (History) Close() error { return nil }

// Continues checks that the live log continues the archive: it starts at
// or before the archive's end (no gap), the chain hash before its start is
// the archive's at that position, and, while it still holds the archive's
// last event, it gives that event the archive's chain hash (a store that
// keeps no chain is not compared). It returns the live log's start, and a
// *Mismatch when the two do not join.
func (h History) Continues(ctx context.Context) (uint64, error) {
	start, err := h.liveStart(ctx)
	if err != nil {
		return 0, err
	}
	if len(h.Archive.Segments()) == 0 {
		return start, nil
	}
	end := h.Archive.End()
	if start > end {
		return start, &Mismatch{Position: end, Reason: fmt.Sprintf("the archive ends at %d, the live log starts at %d: positions %d..%d are in neither", end-1, start, end, start-1)}
	}
	if start < end {
		// The live log still holds the archive's last event (not
		// trimmed yet): both must agree on its chain hash.
		evs, err := h.Live.ReadAll(ctx, end-1, 1)
		if err != nil {
			return start, err
		}
		if len(evs) == 1 && evs[0].Position == end-1 && !evs[0].Hash.IsZero() && evs[0].Hash != h.Archive.EndHash() {
			return start, &Mismatch{Position: end - 1, Reason: fmt.Sprintf("the live log's chain hash at %d is %s, the archive's %s: they hold different histories", end-1, evs[0].Hash, h.Archive.EndHash())}
		}
	}
	if start < h.Archive.First() {
		return start, nil // the live log holds the whole archive still
	}
	t, ok := h.Live.(eventstore.Trimmer)
	if !ok {
		return start, nil
	}
	_, prev, err := t.Start(ctx)
	if err != nil {
		return start, err
	}
	want, err := h.Archive.PrevHash(ctx, start)
	if err != nil {
		return start, err
	}
	if start > 0 && prev != want {
		return start, &Mismatch{Position: start, Reason: fmt.Sprintf("the live log starts after chain hash %s, the archive holds %s for position %d", prev, want, start-1)}
	}
	return start, nil
}
