// Package domain holds turnstile's events, aggregates and rules. It is pure Go:
// no I/O, no clock reads, nothing of ours imported. Everything that decides uses
// values passed in (including "now"), so the same inputs always give the same events.
package domain

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Owner names the party that wrote an event. The handoff rule decides which owner
// may write which event in which state.
type Owner string

// The owners of events.
const (
	OwnerAPI      Owner = "api"
	OwnerExecutor Owner = "executor"
	OwnerWorker   Owner = "worker"
)

// Valid reports whether o is one of the known owners.
func (o Owner) Valid() bool {
	return o == OwnerAPI || o == OwnerExecutor || o == OwnerWorker
}

// Envelope is one event as the log carries it: where it lives (stream, version,
// position), what it is (type, schema version), who wrote it and why (owner,
// correlation, causation), and its payload as JSON bytes.
//
// Writers fill ID, Type, SchemaVersion, Owner, the correlation ids, Data and
// Metadata. The store fills Stream, Version, Position, Time and Hash when it commits, so
// Time is the log's clock, never a writer's.
type Envelope struct {
	Stream        string          `json:"stream"`
	Version       uint64          `json:"version"`  // 0-based within Stream
	Position      uint64          `json:"position"` // strictly increasing in commit order across the log
	ID            uuid.UUID       `json:"id"`       // re-appending the same id is idempotent
	Type          string          `json:"type"`     // stable name, e.g. "execution.scheduled"
	SchemaVersion int             `json:"schema_version"`
	Time          time.Time       `json:"time"` // UTC, set by the store at commit
	Owner         Owner           `json:"owner"`
	CorrelationID string          `json:"correlation_id,omitempty"`
	CausationID   string          `json:"causation_id,omitempty"`
	Writer        string          `json:"writer,omitempty"` // which instance wrote it; for worker-owned events, the worker id
	Data          json.RawMessage `json:"data"`
	Metadata      json.RawMessage `json:"metadata,omitempty"`
	// Hash links the event into the log's hash chain (eventstore.NextHash
	// of the hash before it and this event). The store fills it at commit,
	// like Position; zero from a store that keeps no chain.
	Hash Hash `json:"hash,omitzero"`
}
