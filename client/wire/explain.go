package wire

// Explanation answers GET /api/v1/executions/{id}/explain: why an
// execution is not running now. QueuePlace is its place among its queue's
// waiters in grant order (1 is next; 0 when it waits in no queue: backing
// off, not due yet, granted or ended), Ahead how many are before it, and
// WaitingFor every reason it is not granted now, each one of "slot",
// "total_slot", "paused", "rate_limit", "backoff", "run_at", "priority",
// "no_worker" (empty once it is granted or has ended). LogPosition is the
// log position the answer holds for.
type Explanation struct {
	Status     string `json:"status"`
	QueuePlace int    `json:"queue_place"`
	// Position is QueuePlace under its name before issue 35, still served
	// beside it.
	//
	// Deprecated: read QueuePlace; a position elsewhere is one in the log.
	Position    int      `json:"position"`
	Ahead       int      `json:"ahead"`
	WaitingFor  []string `json:"waiting_for"`
	LogPosition uint64   `json:"log_position"`
}
