package wire

// Explanation answers GET /api/v1/executions/{id}/explain: why an
// execution is not running now. QueuePlace is its place among its queue's
// waiters in grant order (1 is next; 0 when it waits in no queue: backing
// off, not due yet, granted or ended), Ahead how many are before it, and
// WaitingFor every reason it is not granted now, each one of "slot",
// "total_slot", "paused", "rate_limit", "backoff", "run_at", "priority",
// "no_worker", "resource" (empty once it is granted or has ended).
// Reasons details them, one per entry of WaitingFor in the same order (a
// field added beside WaitingFor, which keeps its strings). LogPosition is
// the log position the answer holds for.
type Explanation struct {
	Status     string `json:"status"`
	QueuePlace int    `json:"queue_place"`
	// Position is QueuePlace under its name before issue 35, still served
	// beside it.
	//
	// Deprecated: read QueuePlace; a position elsewhere is one in the log.
	Position    int          `json:"position"`
	Ahead       int          `json:"ahead"`
	WaitingFor  []string     `json:"waiting_for"`
	Reasons     []WaitReason `json:"reasons"`
	LogPosition uint64       `json:"log_position"`
}

// WaitReason is one reason an execution waits. For "resource": the resource,
// the key value it waits for ("" unkeyed), the units of that key value in
// use and the resource's max_concurrent, or the rate limit that allows no
// grant now.
type WaitReason struct {
	Reason        string     `json:"reason"`
	Resource      string     `json:"resource,omitempty"`
	Key           string     `json:"key,omitempty"`
	InUse         int        `json:"in_use,omitempty"`
	MaxConcurrent int        `json:"max_concurrent,omitempty"`
	RateLimit     *RateLimit `json:"rate_limit,omitempty"`
}
