package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
)

// TestResourcesRoutes: PUT defines (201) and changes (200) a resource; a
// policy naming an undefined resource or more units than its
// max_concurrent, a request without a keyed resource's key_field, a bad
// limit, and deleting a resource a policy names are refused (400 / 409
// with a problem) and write nothing; GET shows units in use and waiters
// per key value, busiest first, paged; a built-in runner that reads its
// input strictly ignores the key field; DELETE of an unused one is 204.
func TestResourcesRoutes(t *testing.T) {
	e := newE2E(t)
	e.mustJSON("PUT", "/api/v1/resources/gpu", map[string]any{"max_concurrent": 1, "key_field": "tenant"}, http.StatusCreated, nil)
	e.mustJSON("PUT", "/api/v1/resources/gpu", map[string]any{"max_concurrent": 1, "key_field": "tenant"}, http.StatusOK, nil)
	var res wire.Resource
	e.mustJSON("PUT", "/api/v1/resources/gpu", map[string]any{"max_concurrent": 2, "key_field": "tenant"}, http.StatusOK, &res)
	if res.MaxConcurrent != 2 || res.KeyField != "tenant" {
		t.Fatalf("changed: %+v", res)
	}
	head, _ := e.store.Head(context.Background())
	refuse := func(method, path string, body any, status int, detail string) {
		t.Helper()
		st, h, b := e.do(method, path, body)
		var p api.Problem
		if st != status || json.Unmarshal(b, &p) != nil || h.Get("Content-Type") != "application/problem+json" || !strings.Contains(p.Detail, detail) {
			t.Errorf("%s %s %v: %d %s, want %d with a problem containing %q", method, path, body, st, b, status, detail)
		}
	}
	refuse("PUT", "/api/v1/resources/x", map[string]any{}, 400, "needs max_concurrent or rate_limit")
	refuse("PUT", "/api/v1/resources/x", map[string]any{"max_concurrent": 1, "extra": 1}, 400, "extra")
	refuse("PUT", "/api/v1/resources/-x", map[string]any{"max_concurrent": 1}, 400, "")
	refuse("POST", "/api/v1/actions", map[string]any{"ref": "r.a", "runner": "core.sleep", "resources": []any{"nope"}}, 400, `resource "nope" is not defined`)
	refuse("POST", "/api/v1/actions", map[string]any{"ref": "r.a", "runner": "core.sleep", "resources": []any{map[string]any{"name": "gpu", "units": 3}}}, 400, "above its max_concurrent 2")
	if after, _ := e.store.Head(context.Background()); after != head {
		t.Errorf("refused bodies appended %d events", after-head)
	}
	e.mustJSON("POST", "/api/v1/actions", map[string]any{"ref": "r.a", "runner": "core.sleep", "max_concurrent": 10,
		"resources": []any{"gpu"}}, http.StatusCreated, nil)
	head, _ = e.store.Head(context.Background())
	refuse("POST", "/api/v1/executions", map[string]any{"action": "r.a", "input": map[string]any{"seconds": 0}}, 400, `no field "tenant"`)
	refuse("DELETE", "/api/v1/resources/gpu", nil, 409, `named by the policy of "r.a"`)
	if after, _ := e.store.Head(context.Background()); after != head {
		t.Errorf("refused requests appended %d events", after-head)
	}
	short := e.request("r.a", map[string]any{"seconds": 0, "tenant": "zeta"})
	e.waitStatus(short, domain.StatusCompleted) // core.sleep reads its input strictly: it ignored "tenant"
	var long []string
	for range 3 {
		long = append(long, e.request("r.a", map[string]any{"seconds": 30, "tenant": "acme"}))
	}
	e.waitStatus(long[0], domain.StatusRunning)
	e.waitStatus(long[1], domain.StatusRunning)
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.mustJSON("GET", "/api/v1/resources/gpu", nil, http.StatusOK, &res)
		if res.Waiting == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if res.InUse != 2 || res.Waiting != 1 || len(res.Keys) != 1 || res.Keys[0] != (wire.ResourceKey{Key: "acme", InUse: 2, Waiting: 1}) {
		t.Fatalf("GET gpu: %+v, want acme with 2 in use and 1 waiting", res)
	}
	if st, _, b := e.do("GET", "/metrics", nil); st != http.StatusOK || !strings.Contains(string(b), `turnstile_resource_in_use{resource="gpu"} 2`) ||
		!strings.Contains(string(b), `turnstile_resource_waiting{resource="gpu"} 1`) || !strings.Contains(string(b), `turnstile_resource_max_concurrent{resource="gpu"} 2`) {
		t.Errorf("metrics: %d, no gpu figures in\n%s", st, b)
	}
	e.mustJSON("PUT", "/api/v1/resources/other", map[string]any{"rate_limit": map[string]any{"count": 1, "per_seconds": 1}}, http.StatusCreated, nil)
	var list wire.ResourceList
	e.mustJSON("GET", "/api/v1/resources", nil, http.StatusOK, &list)
	if len(list.Resources) != 2 || list.Resources[0].Name != "gpu" || list.Resources[1].RateLimit == nil {
		t.Fatalf("list: %+v", list)
	}
	e.mustJSON("GET", "/api/v1/resources/gpu?limit=1&cursor=1", nil, http.StatusOK, &res)
	if len(res.Keys) != 0 || res.NextCursor != "" {
		t.Fatalf("second page: %+v", res)
	}
	refuse("GET", "/api/v1/resources/gpu?limit=0", nil, 400, "limit")
	e.mustJSON("DELETE", "/api/v1/resources/other", nil, http.StatusNoContent, nil)
	refuse("GET", "/api/v1/resources/other", nil, 404, `resource "other" is not defined`)
	refuse("DELETE", "/api/v1/resources/other", nil, 404, `resource "other" is not defined`)
}
