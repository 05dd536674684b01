package client

import (
	"context"

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

// Workers returns the workers the log knows, sorted by id: their status,
// last heartbeat, slots, runners and in-flight executions.
func (c *Client) Workers(ctx context.Context) ([]wire.Worker, error) {
	var list wire.WorkerList
	_, err := c.call(ctx, request{method: "GET", path: "/api/v1/workers"}, &list)
	return list.Workers, err
}
