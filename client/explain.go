package client

import "context"

// Explanation says why an execution waits (GET /api/v1/executions/{id}/explain,
// API.md "Policies and requests").
type Explanation struct {
	Status     string `json:"status"`      // the execution's status
	QueuePlace int    `json:"queue_place"` // its place among its queue's waiters, 1 = next; 0 once granted or ended
	// Position is QueuePlace under its name before issue 35 (a server of
	// then sends only it; Explain fills QueuePlace from it).
	//
	// Deprecated: read QueuePlace; a position elsewhere is one in the log.
	Position int `json:"position"`
	Ahead    int `json:"ahead"` // how many waiters are before it
	// WaitingFor lists the reasons it is not running now, each one of
	// "slot", "total_slot", "paused", "rate_limit", "backoff", "run_at",
	// "priority", "no_worker"; empty once granted or ended.
	WaitingFor []string `json:"waiting_for"`
}

// Explain asks the server why the execution waits. A server that does not
// serve the route yet (older than the policies of API.md's "next wave")
// answers a 404 whose Detail names the route, as it does for an unknown
// execution: IsNotFound holds for both.
func (c *Client) Explain(ctx context.Context, id string) (Explanation, error) {
	var e Explanation
	_, err := c.call(ctx, request{method: "GET", path: "/api/v1/executions/" + esc(id) + "/explain"}, &e)
	if e.QueuePlace == 0 {
		e.QueuePlace = e.Position // a server older than queue_place
	}
	return e, err
}
