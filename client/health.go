package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// Health is the answer of /healthz: the process serves.
type Health struct {
	Status  string `json:"status"` // "ok"
	Version string `json:"version"`
}

// Health asks whether the server's process is alive.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	_, err := c.call(ctx, request{method: "GET", path: "/healthz"}, &h)
	return h, err
}

// Readiness is the answer of /readyz.
type Readiness struct {
	Ready    bool   `json:"-"`      // the server serves reads that are current
	Status   string `json:"status"` // "ready", "starting" or "catching up"
	Position uint64 `json:"position"`
	Head     uint64 `json:"head"`
	Lag      uint64 `json:"lag"` // events the read model is behind the log
}

// Ready asks whether the server is ready: its read model has caught up
// with the log. A server that is not ready yet answers with Ready false
// and no error; a server that cannot read its log is a *Problem
// (IsUnavailable).
func (c *Client) Ready(ctx context.Context) (Readiness, error) {
	var r Readiness
	resp, data, err := c.do(ctx, request{method: "GET", path: "/readyz"})
	if resp != nil && resp.StatusCode == http.StatusServiceUnavailable && err != nil {
		var kind struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(data, &kind) == nil && kind.Type == "" && json.Unmarshal(data, &r) == nil && r.Status != "" {
			return r, nil // not ready: the body is a readiness, not a problem
		}
	}
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("GET /readyz: %w", err)
	}
	r.Ready = true
	return r, nil
}
