package client

import (
	"context"
	"net/http"

	"github.com/turnstile/turnstile/client/wire"
)

// DefineAction defines an action with policy p (p.Ref and p.Runner are
// required; zero fields take the server's defaults) and returns it as the
// server holds it. created is true when the action is new, false when the
// same policy was already defined; a different policy already defined is
// a conflict (IsConflict): change it with SetPolicy.
func (c *Client) DefineAction(ctx context.Context, p wire.Policy) (a wire.Action, created bool, err error) {
	resp, err := c.call(ctx, request{method: "POST", path: "/api/v1/actions", body: p}, &a)
	if err != nil {
		return wire.Action{}, false, err
	}
	return a, resp.StatusCode == http.StatusCreated, nil
}

// Action returns the action ref (IsNotFound if it is not defined).
func (c *Client) Action(ctx context.Context, ref string) (wire.Action, error) {
	var a wire.Action
	_, err := c.call(ctx, request{method: "GET", path: "/api/v1/actions/" + esc(ref)}, &a)
	return a, err
}

// Actions returns every defined action, sorted by ref.
func (c *Client) Actions(ctx context.Context) ([]wire.Action, error) {
	var list wire.ActionList
	_, err := c.call(ctx, request{method: "GET", path: "/api/v1/actions"}, &list)
	return list.Actions, err
}

// PauseAction stops granting slots to the action's executions (running
// ones go on, requests still queue); reason, if not empty, is recorded in
// the log. Pausing a paused action changes nothing.
func (c *Client) PauseAction(ctx context.Context, ref, reason string) (wire.Action, error) {
	var a wire.Action
	var body any
	if reason != "" {
		body = wire.Reason{Reason: reason}
	}
	_, err := c.call(ctx, request{method: "POST", path: "/api/v1/actions/" + esc(ref) + "/pause", body: body}, &a)
	return a, err
}

// ResumeAction starts granting slots again. Resuming an action that is not
// paused changes nothing.
func (c *Client) ResumeAction(ctx context.Context, ref string) (wire.Action, error) {
	var a wire.Action
	_, err := c.call(ctx, request{method: "POST", path: "/api/v1/actions/" + esc(ref) + "/resume"}, &a)
	return a, err
}

// SetPolicy replaces the action's whole policy with p (p.Ref may be empty;
// if not, it must be ref); it takes effect from the next grant. To change
// one field, read the action, change its Policy and set it.
func (c *Client) SetPolicy(ctx context.Context, ref string, p wire.Policy) (wire.Action, error) {
	var a wire.Action
	_, err := c.call(ctx, request{method: "PUT", path: "/api/v1/actions/" + esc(ref) + "/policy", body: p}, &a)
	return a, err
}
