package eventstore

import (
	"bytes"
	"fmt"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
)

// Replayed applies the idempotency rule for a backend that can look up a
// stored event by id (stored returns nil for an unknown id). If no event id
// of appends is stored it returns done == false. If every one is stored, in
// the same streams, at consecutive versions in the order given and with the
// same content, it returns the result the original append returned and
// done == true. Anything in between is ErrIdempotencyConflict.
func Replayed(appends []StreamAppend, stored func(uuid.UUID) *domain.Envelope) (res AppendResult, done bool, err error) {
	known, total := 0, 0
	for i := range appends {
		for j := range appends[i].Events {
			total++
			if stored(appends[i].Events[j].ID) != nil {
				known++
			}
		}
	}
	if known == 0 {
		return res, false, nil
	}
	if known < total {
		return res, false, fmt.Errorf("%w: %d of the %d event ids are already stored", ErrIdempotencyConflict, known, total)
	}
	for i := range appends {
		a := &appends[i]
		var prev *domain.Envelope
		for j := range a.Events {
			e := &a.Events[j]
			s := stored(e.ID)
			switch {
			case s.Stream != a.Stream:
				return res, false, fmt.Errorf("%w: event %s is stored in stream %q, not %q", ErrIdempotencyConflict, e.ID, s.Stream, a.Stream)
			case prev != nil && s.Version != prev.Version+1:
				return res, false, fmt.Errorf("%w: event %s is stored at version %d of %q, not right after event %s", ErrIdempotencyConflict, e.ID, s.Version, a.Stream, prev.ID)
			case !SameContent(s, e):
				return res, false, fmt.Errorf("%w: event %s (%s, version %d of %q) is stored with different content", ErrIdempotencyConflict, e.ID, s.Type, s.Version, a.Stream)
			}
			prev = s
			res = AppendResult{Version: s.Version, Position: s.Position}
		}
	}
	return res, true, nil
}

// SameContent compares the fields a writer fills (not those the store sets:
// position, version, time).
func SameContent(a, b *domain.Envelope) bool {
	return a.Type == b.Type && a.SchemaVersion == b.SchemaVersion && a.Owner == b.Owner &&
		a.CorrelationID == b.CorrelationID && a.CausationID == b.CausationID && a.Writer == b.Writer &&
		bytes.Equal(a.Data, b.Data) && bytes.Equal(a.Metadata, b.Metadata)
}
