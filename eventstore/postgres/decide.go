package postgres

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// outcome is what one request of a group gets if the group commits.
type outcome struct {
	res eventstore.AppendResult
	err error
}

// plan is what a group commit writes, decided under the log_head lock.
type plan struct {
	next     uint64            // log_head.next after the group
	rows     []domain.Envelope // to insert, in position order, Stream, Version and Position set
	outcomes []outcome         // one per request, in group order
	heads    map[string]int64  // the last version of the group's streams after it (streams with no events left out)
}

// decide applies a group's requests to the state of the log, one after
// another in group order, exactly as if each had been appended alone: the
// idempotency rule first, then the expected versions, then positions and
// versions for the events of the requests that pass. The state is next (the
// position of the next event), heads (streams mapped to their last version;
// a stream missing from it has no events) and stored (every stored event
// whose id the group names); decide updates heads and stored as it goes. A
// request that fails changes nothing and does not affect the others.
func decide(next uint64, heads map[string]int64, stored map[uuid.UUID]*domain.Envelope, group []*request) plan {
	n := 0
	for _, r := range group {
		n += r.events
	}
	// Rows never outgrow their first allocation, so stored may point into it.
	p := plan{outcomes: make([]outcome, len(group)), rows: make([]domain.Envelope, 0, n)}
	for i, r := range group {
		if res, done, err := eventstore.Replayed(r.appends, func(id uuid.UUID) *domain.Envelope { return stored[id] }); done || err != nil {
			p.outcomes[i] = outcome{res, err}
			continue
		}
		if err := checkExpected(heads, r.appends); err != nil {
			p.outcomes[i].err = err
			continue
		}
		for _, a := range r.appends {
			if len(a.Events) == 0 {
				continue // a condition: checkExpected checked it
			}
			last := headOf(heads, a.Stream)
			for j := range a.Events {
				last++
				p.rows = append(p.rows, a.Events[j])
				e := &p.rows[len(p.rows)-1]
				e.Stream, e.Version, e.Position = a.Stream, uint64(last), next
				next++
				stored[e.ID] = e
			}
			heads[a.Stream] = last
		}
		e := &p.rows[len(p.rows)-1]
		p.outcomes[i].res = eventstore.AppendResult{Version: e.Version, Position: e.Position}
	}
	p.next, p.heads = next, heads
	return p
}

// headOf returns a stream's last version from heads, -1 if it has none.
func headOf(heads map[string]int64, stream string) int64 {
	if last, ok := heads[stream]; ok {
		return last
	}
	return -1
}

// checkExpected returns the WrongVersionError of the first append whose
// expected version the streams' heads do not satisfy.
func checkExpected(heads map[string]int64, appends []eventstore.StreamAppend) error {
	for _, a := range appends {
		last := headOf(heads, a.Stream)
		if !a.Expected.Satisfied(last >= 0, uint64(last)) {
			e := &eventstore.WrongVersionError{Stream: a.Stream, Expected: a.Expected, Exists: last >= 0}
			if e.Exists {
				e.Actual = uint64(last)
			}
			return e
		}
	}
	return nil
}

// conflict turns a unique violation that a request hit even when appended
// alone into the error its caller branches on: a stored id is
// ErrIdempotencyConflict; a taken (stream, version) is the WrongVersionError
// of the first stream whose expected version no longer holds, or, if they
// all still hold (the other writer raced again), of the first stream.
func (s *Store) conflict(ctx context.Context, r *request, pgErr *pgconn.PgError) error {
	if idKey(pgErr.ConstraintName) {
		return fmt.Errorf("%w: an event id was stored at the same time by a writer outside the store: %w", eventstore.ErrIdempotencyConflict, pgErr)
	}
	streams := make([]string, len(r.appends))
	for i, a := range r.appends {
		streams[i] = a.Stream
	}
	heads, err := scanHeads(s.pool.Query(ctx, s.sql.streamHeads, streams))
	if err != nil {
		return fmt.Errorf("postgres: append: %w (and reading the streams after it: %w)", pgErr, err)
	}
	if err := checkExpected(heads, r.appends); err != nil {
		return err
	}
	a := r.appends[0]
	last := headOf(heads, a.Stream)
	return &eventstore.WrongVersionError{Stream: a.Stream, Expected: a.Expected, Exists: last >= 0, Actual: uint64(max(last, 0))}
}
