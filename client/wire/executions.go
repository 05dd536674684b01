// Executions: a request, the answer to a command, an execution's state and
// pages of them.
package wire

import (
	"encoding/json"
	"time"
)

// ExecutionRequest is the body of POST /api/v1/executions.
type ExecutionRequest struct {
	Action      string            `json:"action"`
	Input       json.RawMessage   `json:"input,omitempty"`
	WithItems   []json.RawMessage `json:"with_items,omitempty"`
	Concurrency int               `json:"concurrency,omitempty"`
	// Priority is 1..4 (1 first; omitted: 2). RunAt (RFC 3339) or
	// DelaySeconds make the execution wait in no queue until then (log
	// time). None of them with WithItems.
	Priority     int      `json:"priority,omitempty"`
	RunAt        string   `json:"run_at,omitempty"`
	DelaySeconds *float64 `json:"delay_seconds,omitempty"`
}

// Accepted answers a request or a cancellation (202): the execution's id and
// its status as the server knew it.
type Accepted struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// Execution is an execution's state and the log position it is current as
// of.
type Execution struct {
	ID             string          `json:"id"`
	Action         string          `json:"action"`
	ConcurrencyKey string          `json:"concurrency_key,omitempty"`
	Parent         string          `json:"parent,omitempty"`
	ItemIndex      int             `json:"item_index,omitempty"`
	Items          int             `json:"items,omitempty"`
	Concurrency    int             `json:"concurrency,omitempty"`
	Children       []string        `json:"children,omitempty"`           // a with_items parent's children, one per item, in item order
	ChildrenAsked  int             `json:"children_requested,omitempty"` // how many of them have been requested (the first ones)
	Status         string          `json:"status"`
	Worker         string          `json:"worker,omitempty"`
	Attempt        int             `json:"attempt"`
	CancelAsked    bool            `json:"cancel_requested,omitempty"`
	Input          json.RawMessage `json:"input,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          string          `json:"error,omitempty"`
	Code           string          `json:"code,omitempty"` // of a rejection, failure or cancellation, when it has one
	RequestedAt    *time.Time      `json:"requested_at,omitempty"`
	SchedulingAt   *time.Time      `json:"scheduling_at,omitempty"`
	ScheduledAt    *time.Time      `json:"scheduled_at,omitempty"`
	RunningAt      *time.Time      `json:"running_at,omitempty"`
	EndedAt        *time.Time      `json:"ended_at,omitempty"`
	Version        int64           `json:"version"`  // of the execution's stream
	Position       uint64          `json:"position"` // the log position this state is current as of
	// Archived: the live log no longer holds this execution; its state is
	// folded from the archive (a server started with --archive).
	Archived bool `json:"archived,omitempty"`
}

// ExecutionList is a page of GET /api/v1/executions, newest first; Next is
// the cursor (after=) of the next page, "" on the last.
type ExecutionList struct {
	Executions []Execution `json:"executions"`
	Next       string      `json:"next"`
}
