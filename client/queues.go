package client

import (
	"context"
	"net/url"

	"github.com/turnstile/turnstile/client/wire"
)

// QueueStats returns the action's queue statistics (IsNotFound if the
// action is not defined).
func (c *Client) QueueStats(ctx context.Context, ref string, opts ...ReadOption) (wire.QueueStats, error) {
	var st wire.QueueStats
	_, err := c.call(ctx, request{method: "GET", path: "/api/v1/actions/" + esc(ref) + "/queue-stats", query: readQuery(opts)}, &st)
	return st, err
}

// AllQueueStats returns every action's queue statistics, sorted by action,
// and the log position they are current as of.
func (c *Client) AllQueueStats(ctx context.Context, opts ...ReadOption) (wire.QueueStatsList, error) {
	var list wire.QueueStatsList
	_, err := c.call(ctx, request{method: "GET", path: "/api/v1/queue-stats", query: readQuery(opts)}, &list)
	return list, err
}

// Queue returns the action's queue: its waiting executions in FIFO order
// (the order they will be granted slots in), then the active ones.
func (c *Client) Queue(ctx context.Context, ref string, opts ...ReadOption) (wire.Queue, error) {
	var q wire.Queue
	_, err := c.call(ctx, request{method: "GET", path: "/api/v1/actions/" + esc(ref) + "/queue", query: readQuery(opts)}, &q)
	return q, err
}

// Workers returns the workers the server lists, sorted by id, following
// its pages: their status, last heartbeat, slots, runners and in-flight
// executions. The server leaves out workers that ended (lost or stopped)
// more than an hour ago; with AllWorkers it lists every one.
func (c *Client) Workers(ctx context.Context, opts ...WorkersOption) ([]wire.Worker, error) {
	out := []wire.Worker{}
	after := ""
	for {
		q := url.Values{}
		for _, o := range opts {
			o(q)
		}
		if after != "" {
			q.Set("after", after)
		}
		var page wire.WorkerList
		if _, err := c.call(ctx, request{method: "GET", path: "/api/v1/workers", query: q}, &page); err != nil {
			return out, err
		}
		out = append(out, page.Workers...)
		if page.Next == "" || page.Next <= after {
			return out, nil
		}
		after = page.Next
	}
}

// WorkersOption chooses what Workers lists.
type WorkersOption func(url.Values)

// AllWorkers makes Workers list every worker the log knows, those that
// ended long ago too.
func AllWorkers() WorkersOption { return func(q url.Values) { q.Set("all", "true") } }
