// Events: one event of the log as the replay routes and the event feed send
// it, and a page of them.
package wire

import (
	"encoding/json"
	"time"
)

// Event is one event of the log: its envelope and its data.
type Event struct {
	Stream        string          `json:"stream"`
	Version       uint64          `json:"version"`  // 0-based within Stream
	Position      uint64          `json:"position"` // strictly increasing in commit order across the log
	ID            string          `json:"id"`       // a UUID
	Type          string          `json:"type"`     // e.g. "execution.scheduled"
	SchemaVersion int             `json:"schema_version"`
	Time          time.Time       `json:"time"` // UTC, of the commit
	Owner         string          `json:"owner"`
	CorrelationID string          `json:"correlation_id,omitempty"`
	CausationID   string          `json:"causation_id,omitempty"`
	Writer        string          `json:"writer,omitempty"`
	Data          json.RawMessage `json:"data"`
	Metadata      json.RawMessage `json:"metadata,omitempty"`
}

// EventPage is a page of the log or of one stream; Next is the from= of the
// next page (a position for the log, a version for a stream).
type EventPage struct {
	Events []Event `json:"events"`
	Next   uint64  `json:"next"`
}
