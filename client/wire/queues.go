// Queues: an action's queue statistics and its queue's contents.
package wire

import "time"

// QueueStats is an action's queue statistics.
type QueueStats struct {
	Action           string     `json:"action"`
	QueueLength      int        `json:"queue_length"`
	ActiveCount      int        `json:"active_count"`
	MaxConcurrent    int        `json:"max_concurrent"`
	Paused           bool       `json:"paused"`
	OldestEnqueuedAt *time.Time `json:"oldest_enqueued_at"`
	TotalEnqueued    uint64     `json:"total_enqueued"`
	TotalGranted     uint64     `json:"total_granted"`
	TotalCompleted   uint64     `json:"total_completed"`
	TotalFailed      uint64     `json:"total_failed"`
	TotalTimedOut    uint64     `json:"total_timed_out"`
	TotalRejected    uint64     `json:"total_rejected"`
	TotalCancelled   uint64     `json:"total_cancelled"`
	WaitP50Ms        float64    `json:"wait_p50_ms"`
	WaitP95Ms        float64    `json:"wait_p95_ms"`
	Position         uint64     `json:"position"` // the log position these figures are current as of
	// NoWorker is true when no active worker serves the action's runner:
	// its executions wait in the queue until one registers.
	NoWorker bool `json:"no_worker,omitempty"`
}

// QueueStatsList is the answer of GET /api/v1/queue-stats: every defined
// action's statistics, sorted by action, and the log position of the read.
type QueueStatsList struct {
	Position   uint64       `json:"position"`
	QueueStats []QueueStats `json:"queue_stats"`
}

// Queue is an action's queue: the waiting executions in FIFO order, then
// the active ones (granted and not ended), sorted by id.
type Queue struct {
	Action   string   `json:"action"`
	Paused   bool     `json:"paused"`
	Waiting  []Waiter `json:"waiting"`
	Active   []string `json:"active"`
	Position uint64   `json:"position"` // the log position the queue is as of
}

// Waiter is a waiting execution: its id, key, and the log position and time
// of its request (the FIFO order).
type Waiter struct {
	ID             string    `json:"id"`
	ConcurrencyKey string    `json:"concurrency_key,omitempty"`
	Position       uint64    `json:"position"`
	EnqueuedAt     time.Time `json:"enqueued_at"`
	Priority       int       `json:"priority"` // 1..4, 1 first
}
