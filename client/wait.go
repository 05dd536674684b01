package client

import (
	"context"

	"github.com/turnstile/turnstile/client/wire"
)

// Wait waits until the execution has ended and returns its final state
// (completed, failed, timed_out, cancelled or rejected: see Terminal). It
// reads the state once, then follows the executions feed of its action
// from that state on, so it sees the end however soon it comes, and
// survives dropped connections as Follow does. When ctx ends first it
// returns ctx's error with the last state it read (Status tells how far
// the execution got); an unknown execution is IsNotFound.
func (c *Client) Wait(ctx context.Context, id string) (wire.Execution, error) {
	x, err := c.Execution(ctx, id)
	if err != nil || Terminal(x.Status) {
		return x, err
	}
	err = c.FollowExecutions(ctx, FeedOptions{Action: x.Action, Start: After(x.Position)}, func(s wire.Execution) error {
		if s.ID != id {
			return nil
		}
		x = s
		if Terminal(s.Status) {
			return ErrStop
		}
		return nil
	})
	return x, err
}
