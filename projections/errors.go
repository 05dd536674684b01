// Errors of the read side that callers (the API) branch on. A store error
// the query façade returns also matches the sentinel here that stands for
// it (and keeps its message), so a caller needs no store package to
// classify it.
package projections

import (
	"errors"
	"fmt"

	"github.com/turnstile/turnstile/eventstore"
)

var (
	// ErrUnknownStream: no stream has that name (404). It wraps
	// eventstore.ErrStreamNotFound.
	ErrUnknownStream = fmt.Errorf("unknown stream: %w", eventstore.ErrStreamNotFound)
	// ErrInvalidQuery: the query names something the log cannot hold (a
	// malformed stream name, an as_of that is no point of the log) (400).
	// Store errors it stands for: eventstore.ErrInvalidStream,
	// ErrInvalidEvent and ErrEventTooLarge.
	ErrInvalidQuery = errors.New("invalid query")
	// ErrUnavailable: the log cannot be read now (503). It wraps
	// eventstore.ErrClosed.
	ErrUnavailable = fmt.Errorf("log unavailable: %w", eventstore.ErrClosed)
	// ErrArchived: the query reaches before the live log's start, which
	// only the archive holds now (410, unless the Queries have an archive:
	// WithArchive). It wraps eventstore.ErrTrimmed, whose message names
	// the live log's first position.
	ErrArchived = fmt.Errorf("archived: %w", eventstore.ErrTrimmed)
	// ErrCorrupt: what the query needs does not verify (an archive
	// segment whose hash chain is broken): nothing of it is served (500).
	// It wraps eventstore.ErrCorrupt.
	ErrCorrupt = fmt.Errorf("the log does not verify: %w", eventstore.ErrCorrupt)
)

// classified is a store error that also matches one of the sentinels above;
// its message is the store's.
type classified struct{ err, kind error }

func (c *classified) Error() string   { return c.err.Error() }
func (c *classified) Unwrap() []error { return []error{c.err, c.kind} }

// storeError marks err with the sentinel of this package it stands for.
func storeError(err error) error {
	var kind error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, eventstore.ErrStreamNotFound):
		kind = ErrUnknownStream
	case errors.Is(err, eventstore.ErrInvalidStream), errors.Is(err, eventstore.ErrInvalidEvent), errors.Is(err, eventstore.ErrEventTooLarge):
		kind = ErrInvalidQuery
	case errors.Is(err, eventstore.ErrClosed), errors.Is(err, eventstore.ErrUnavailable):
		kind = ErrUnavailable
	case errors.Is(err, eventstore.ErrTrimmed):
		kind = ErrArchived
	case errors.Is(err, eventstore.ErrCorrupt):
		kind = ErrCorrupt
	default:
		return err
	}
	return &classified{err: err, kind: kind}
}
