package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	"github.com/turnstile/turnstile/client/wire"
)

// Terminal reports whether an execution in status has ended: completed,
// failed, timed_out, cancelled or rejected. An ended execution never
// changes again.
func Terminal(status string) bool {
	switch status {
	case "completed", "failed", "timed_out", "cancelled", "rejected":
		return true
	}
	return false
}

// RequestOption qualifies one RequestExecution.
type RequestOption func(*http.Header)

// WithIdempotencyKey makes the request safe to retry: the same key with the
// same body answers the same execution (Requested.Replayed), with another
// body it is a conflict (IsConflict).
func WithIdempotencyKey(key string) RequestOption {
	return func(h *http.Header) { h.Set("Idempotency-Key", key) }
}

// Requested is the server's answer to a request: the execution's id and its
// status then, and whether an earlier request with the same idempotency
// key had already created it.
type Requested struct {
	ID       string
	Status   string
	Replayed bool
}

// RequestExecution requests an execution of req.Action. The server refuses
// a request for an action that is not defined (IsNotFound), one of an
// invalid shape (IsInvalid), and one its action's queue would refuse
// (IsRateLimited).
func (c *Client) RequestExecution(ctx context.Context, req wire.ExecutionRequest, opts ...RequestOption) (Requested, error) {
	header := http.Header{}
	for _, o := range opts {
		o(&header)
	}
	var acc wire.Accepted
	resp, err := c.call(ctx, request{method: "POST", path: "/api/v1/executions", body: req, header: header}, &acc)
	if err != nil {
		return Requested{}, err
	}
	return Requested{ID: acc.ID, Status: acc.Status, Replayed: resp.Header.Get("Idempotent-Replayed") == "true"}, nil
}

// ReadOption qualifies a read.
type ReadOption func(url.Values)

// AsOf reads the state as it was at a point of the log: a log position
// ("42") or an RFC 3339 time. Execution, Queue, QueueStats and
// AllQueueStats take it.
func AsOf(point string) ReadOption { return func(q url.Values) { q.Set("as_of", point) } }

func readQuery(opts []ReadOption) url.Values {
	q := url.Values{}
	for _, o := range opts {
		o(q)
	}
	return q
}

// Execution returns the execution's state (IsNotFound if there is none, or
// with AsOf, if it did not exist then).
func (c *Client) Execution(ctx context.Context, id string, opts ...ReadOption) (wire.Execution, error) {
	var x wire.Execution
	_, err := c.call(ctx, request{method: "GET", path: "/api/v1/executions/" + esc(id), query: readQuery(opts)}, &x)
	return x, err
}

// ListOptions selects executions to list; zero fields select everything.
type ListOptions struct {
	Action string // only this action's
	Status string // only those in this status
	Parent string // only this with_items parent's children
	Limit  int    // the page size (0: the server's default, 100; at most 1000)
	After  string // the cursor: ExecutionList.Next of the page before
}

func (o ListOptions) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"action": o.Action, "status": o.Status, "parent": o.Parent, "after": o.After} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	return q
}

// Executions returns one page of executions, newest first; its Next is the
// After of the next page, "" on the last.
func (c *Client) Executions(ctx context.Context, opts ListOptions) (wire.ExecutionList, error) {
	var page wire.ExecutionList
	_, err := c.call(ctx, request{method: "GET", path: "/api/v1/executions", query: opts.query()}, &page)
	return page, err
}

// AllExecutions walks every page from opts.After on, newest first. It
// stops at the first error, which it yields.
func (c *Client) AllExecutions(ctx context.Context, opts ListOptions) iter.Seq2[wire.Execution, error] {
	return func(yield func(wire.Execution, error) bool) {
		for {
			page, err := c.Executions(ctx, opts)
			if err != nil {
				yield(wire.Execution{}, err)
				return
			}
			for _, x := range page.Executions {
				if !yield(x, nil) {
					return
				}
			}
			if page.Next == "" {
				return
			}
			opts.After = page.Next
		}
	}
}

// Cancel requests the execution's cancellation (reason, if not empty, is
// recorded in the log) and returns its status when the request was
// recorded. One that has not started ends cancelled; a running one is
// cancelled by its worker. An execution that has already ended is a
// conflict (IsConflict).
func (c *Client) Cancel(ctx context.Context, id, reason string) (wire.Accepted, error) {
	var body any
	if reason != "" {
		body = wire.Reason{Reason: reason}
	}
	var acc wire.Accepted
	_, err := c.call(ctx, request{method: "POST", path: "/api/v1/executions/" + esc(id) + "/cancel", body: body}, &acc)
	return acc, err
}

// ExecutionEvents returns a page of the execution's stream, its events in
// order from version from (inclusive); limit 0 takes the server's default
// page size.
func (c *Client) ExecutionEvents(ctx context.Context, id string, from uint64, limit int) (wire.EventPage, error) {
	return c.eventPage(ctx, "/api/v1/executions/"+esc(id)+"/events", from, limit)
}
