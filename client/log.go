package client

import (
	"context"

	"github.com/turnstile/turnstile/client/wire"
)

// Log asks where the log stands (GET /api/v1/log): its head, the live
// log's start, the archive's segments, and the current digest of its hash
// chain (nil on an empty log or from a store that keeps no chain). Keep the
// digest: `turnstile verify --digest POSITION:HASH` checks it later.
func (c *Client) Log(ctx context.Context) (wire.LogStatus, error) {
	var st wire.LogStatus
	_, err := c.call(ctx, request{method: "GET", path: "/api/v1/log"}, &st)
	return st, err
}
