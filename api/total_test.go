package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/wire"
)

// TestTotalLimitPolicyInput: max_concurrent_total without a
// concurrency_key, below 1 or above the limit is a 400 problem saying so,
// on definition and on a policy change, and nothing is written; a good one
// is kept and shown.
func TestTotalLimitPolicyInput(t *testing.T) {
	e := newE2E(t)
	e.mustJSON("POST", "/api/v1/actions", map[string]any{"ref": "t.ok", "runner": "core.noop",
		"concurrency_key": "tenant", "max_concurrent_total": 3}, http.StatusCreated, nil)
	var a wire.Action
	e.mustJSON("GET", "/api/v1/actions/t.ok", nil, http.StatusOK, &a)
	if a.MaxConcurrentTotal != 3 {
		t.Fatalf("max_concurrent_total shown as %d", a.MaxConcurrentTotal)
	}
	e.mustJSON("POST", "/api/v1/actions", map[string]any{"ref": "t.cip", "runner": "core.noop",
		"concurrency_key": "tenant", "on_limit": "cancel_in_progress"}, http.StatusCreated, nil)
	head, _ := e.store.Head(context.Background())
	for _, c := range []struct{ method, path, body, detail string }{
		{"POST", "/api/v1/actions", `{"ref":"t.a","runner":"core.noop","max_concurrent_total":2}`, "max_concurrent_total needs a concurrency_key"},
		{"POST", "/api/v1/actions", `{"ref":"t.a","runner":"core.noop","concurrency_key":"k","max_concurrent_total":-1}`, "max_concurrent_total -1 must be 1..100000"},
		{"POST", "/api/v1/actions", `{"ref":"t.a","runner":"core.noop","concurrency_key":"k","max_concurrent_total":100001}`, "max_concurrent_total 100001"},
		{"POST", "/api/v1/actions", `{"ref":"t.a","runner":"core.noop","concurrency_key":"k","max_concurrent_total":"2"}`, "max_concurrent_total"},
		{"PUT", "/api/v1/actions/t.ok/policy", `{"ref":"t.ok","runner":"core.noop","max_concurrent_total":3}`, "needs a concurrency_key"},
		{"POST", "/api/v1/actions", `{"ref":"t.a","runner":"core.noop","on_limit":"cancel"}`, `on_limit "cancel" must be "queue", "reject" or "cancel_in_progress"`},
	} {
		st, h, b := e.do(c.method, c.path, c.body)
		var p api.Problem
		if st != http.StatusBadRequest || json.Unmarshal(b, &p) != nil || h.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(p.Detail, c.detail) {
			t.Errorf("%s %s: %d %s, want 400 with a problem containing %q", c.method, c.body, st, b, c.detail)
		}
	}
	if after, _ := e.store.Head(context.Background()); after != head {
		t.Errorf("refused definitions appended %d events", after-head)
	}
}
