package api_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/domain"
)

// TestSayNoEarly: a policy value written as an out-of-range 0 and an input
// of the wrong shape for a built-in runner are refused with a 400 that
// says what is expected, and nothing is written; the same fields left out,
// and any input of a runner that is not built in, are accepted.
func TestSayNoEarly(t *testing.T) {
	a, _ := newTestAPI(t, nil)
	ctx := context.Background()
	if _, err := a.cmds.DefineAction(ctx, domain.Policy{Ref: "custom", Runner: "user.custom"}); err != nil {
		t.Fatal(err)
	}
	h := a.srv.Handler()
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		detail                   string // in the problem's detail
	}{
		{"max_concurrent 0", "POST", "/api/v1/actions", `{"ref":"z","runner":"core.noop","max_concurrent":0}`, 400, "max_concurrent 0 is out of range 1..100000"},
		{"max_attempts 0 on change", "PUT", "/api/v1/actions/demo/policy", `{"runner":"core.sleep","max_attempts":0}`, 400, "max_attempts 0 is out of range"},
		{"two zeros", "POST", "/api/v1/actions", `{"ref":"z","runner":"core.noop","max_queue_length":0,"timeout_seconds":0}`, 400, "max_queue_length 0 is out of range 1..10000000 (default 10000): leave it out for the default; timeout_seconds 0"},
		{"an unknown field still", "POST", "/api/v1/actions", `{"ref":"z","runner":"core.noop","max_concurent":2}`, 400, "max_concurent"},
		{"core.sleep seconds as a string", "POST", "/api/v1/executions", `{"action":"demo","input":{"seconds":"five"}}`, 400, `core.sleep expects {"seconds": 0.25}`},
		{"core.sleep no input", "POST", "/api/v1/executions", `{"action":"demo"}`, 400, `core.sleep expects`},
		{"core.sleep a bad with_items child", "POST", "/api/v1/executions", `{"action":"demo","input":{"seconds":1},"with_items":[{},{"seconds":-1}]}`, 400, `with_items[1]`},
	} {
		before, _ := a.store.Head(ctx)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, request(tc.method, tc.path, "", tc.body))
		var prob struct{ Detail string }
		_ = json.Unmarshal(rec.Body.Bytes(), &prob)
		if rec.Code != tc.status || !strings.Contains(prob.Detail, tc.detail) {
			t.Errorf("%s: %d %s, want %d with %q", tc.name, rec.Code, rec.Body, tc.status, tc.detail)
		}
		if after, _ := a.store.Head(ctx); after != before {
			t.Errorf("%s: %d events written", tc.name, after-before)
		}
	}
	for _, tc := range []struct{ name, method, path, body string }{
		{"fields left out", "POST", "/api/v1/actions", `{"ref":"z","runner":"core.noop"}`},
		{"queue_timeout_seconds 0 (wait forever)", "POST", "/api/v1/actions", `{"ref":"y","runner":"core.noop","queue_timeout_seconds":0}`},
		{"a good core.sleep input", "POST", "/api/v1/executions", `{"action":"demo","input":{"seconds":1}}`},
		{"any input of a runner not built in", "POST", "/api/v1/executions", `{"action":"custom","input":{"seconds":"five"}}`},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, request(tc.method, tc.path, "", tc.body))
		if rec.Code >= 300 {
			t.Errorf("%s: %d %s, want it accepted", tc.name, rec.Code, rec.Body)
		}
	}
}
