package client

import (
	"context"
	"iter"
	"net/url"
	"strconv"

	"github.com/turnstile/turnstile/client/wire"
)

// Events returns a page of the whole log from position from (inclusive),
// in position order; limit 0 takes the server's default page size. The
// page's Next is the from of the next page; a page with no events is the
// end of the log for now.
func (c *Client) Events(ctx context.Context, from uint64, limit int) (wire.EventPage, error) {
	return c.eventPage(ctx, "/api/v1/events", from, limit)
}

// Stream returns a page of one stream (e.g. "execution-<id>",
// "action-<ref>") from version from (inclusive), in order (IsNotFound if
// the stream has no event).
func (c *Client) Stream(ctx context.Context, stream string, from uint64, limit int) (wire.EventPage, error) {
	return c.eventPage(ctx, "/api/v1/streams/"+esc(stream), from, limit)
}

func (c *Client) eventPage(ctx context.Context, path string, from uint64, limit int) (wire.EventPage, error) {
	q := url.Values{}
	if from > 0 {
		q.Set("from", strconv.FormatUint(from, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var page wire.EventPage
	_, err := c.call(ctx, request{method: "GET", path: path, query: q}, &page)
	return page, err
}

// AllEvents walks the log from position from up to its head as the pages
// find it, page by page, in position order; it stops at the first error,
// which it yields. To follow the log past its head, use FollowEvents.
func (c *Client) AllEvents(ctx context.Context, from uint64) iter.Seq2[wire.Event, error] {
	return func(yield func(wire.Event, error) bool) {
		for {
			page, err := c.Events(ctx, from, 0)
			if err != nil {
				yield(wire.Event{}, err)
				return
			}
			for _, e := range page.Events {
				if !yield(e, nil) {
					return
				}
			}
			if len(page.Events) == 0 || page.Next <= from {
				return
			}
			from = page.Next
		}
	}
}
