package postgres

import (
	"bytes"
	"fmt"

	"github.com/google/uuid"

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
	p := plan{outcomes: make([]outcome, len(group))}
	for i, r := range group {
		if res, done, err := replayed(stored, r.appends); done || err != nil {
			p.outcomes[i] = outcome{res, err}
			continue
		}
		if err := checkExpected(heads, r.appends); err != nil {
			p.outcomes[i].err = err
			continue
		}
		for _, a := range r.appends {
			last := headOf(heads, a.Stream)
			for _, e := range a.Events {
				last++
				e.Stream, e.Version, e.Position = a.Stream, uint64(last), next
				next++
				p.rows = append(p.rows, e)
				stored[e.ID] = &e
			}
			heads[a.Stream] = last
		}
		e := &p.rows[len(p.rows)-1]
		p.outcomes[i].res = eventstore.AppendResult{Version: e.Version, Position: e.Position}
	}
	p.next = next
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

// replayed applies the idempotency rule. If no event id of the batch is stored
// it returns done == false. If every one is stored, in the same streams, at
// consecutive versions in the order given and with the same content, it
// returns the result the original append returned and done == true. Anything
// in between is ErrIdempotencyConflict.
func replayed(stored map[uuid.UUID]*domain.Envelope, appends []eventstore.StreamAppend) (res eventstore.AppendResult, done bool, err error) {
	known, total := 0, 0
	for _, a := range appends {
		for _, e := range a.Events {
			total++
			if _, ok := stored[e.ID]; ok {
				known++
			}
		}
	}
	if known == 0 {
		return res, false, nil
	}
	if known < total {
		return res, false, fmt.Errorf("%w: %d of the %d event ids are already stored", eventstore.ErrIdempotencyConflict, known, total)
	}
	for _, a := range appends {
		var prev *domain.Envelope
		for j := range a.Events {
			e := &a.Events[j]
			s := stored[e.ID]
			switch {
			case s.Stream != a.Stream:
				return res, false, fmt.Errorf("%w: event %s is stored in stream %q, not %q", eventstore.ErrIdempotencyConflict, e.ID, s.Stream, a.Stream)
			case prev != nil && s.Version != prev.Version+1:
				return res, false, fmt.Errorf("%w: event %s is stored at version %d of %q, not right after event %s", eventstore.ErrIdempotencyConflict, e.ID, s.Version, a.Stream, prev.ID)
			case !sameContent(s, e):
				return res, false, fmt.Errorf("%w: event %s is stored with different content", eventstore.ErrIdempotencyConflict, e.ID)
			}
			prev = s
			res = eventstore.AppendResult{Version: s.Version, Position: s.Position}
		}
	}
	return res, true, nil
}

// sameContent compares the fields a writer fills.
func sameContent(a, b *domain.Envelope) bool {
	return a.Type == b.Type && a.SchemaVersion == b.SchemaVersion && a.Owner == b.Owner &&
		a.CorrelationID == b.CorrelationID && a.CausationID == b.CausationID && a.Writer == b.Writer &&
		bytes.Equal(a.Data, b.Data) && bytes.Equal(a.Metadata, b.Metadata)
}
