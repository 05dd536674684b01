package eventstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/turnstile/turnstile/domain"
)

// Trimmer is implemented by a Store whose live log can give up a prefix that
// has been archived (DESIGN.md, "The log over months"). Positions never
// change: after Trim(before) the live log holds positions before and up, and
// Head is what it was.
type Trimmer interface {
	// Trim removes the events at positions below before from the live log
	// and reclaims their space. A stream named in keep that has events below
	// before keeps its version: appends continue it, and ReadStream returns
	// its events from the first one at or after before. Every other stream
	// whose events all lie below before is forgotten (it may be created
	// again), and so are the ids of removed events (re-appending one is not
	// recognised as a replay). before must not exceed Head. Trim is
	// idempotent (a before at or below Start changes nothing) and crash-safe:
	// after a crash the live log starts either where it started or at
	// before, and every event at or above its start is intact.
	Trim(ctx context.Context, before uint64, keep []string) error

	// Start returns the live log's first position (0 if nothing was ever
	// trimmed) and the chain hash of the event just before it (the zero Hash
	// at 0).
	Start(ctx context.Context) (first uint64, prev domain.Hash, err error)
}

// ErrTrimmed is returned (inside a *TrimmedError) by ReadAll and Subscribe
// from a position that the live log no longer holds: read the archive.
var ErrTrimmed = errors.New("position trimmed from the live log")

// TrimmedError says where the live log starts now.
type TrimmedError struct {
	From  uint64 // the position asked for
	First uint64 // the live log's first position
}

func (e *TrimmedError) Error() string {
	return fmt.Sprintf("read from position %d: the live log starts at %d: %v", e.From, e.First, ErrTrimmed)
}

// Unwrap lets errors.Is(err, ErrTrimmed) match.
func (e *TrimmedError) Unwrap() error { return ErrTrimmed }
