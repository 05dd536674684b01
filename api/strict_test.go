package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/api"
)

// TestStrictDecoding sends bodies that encoding/json alone would take
// (keys in another case, a key twice) or that are no object where one is
// needed: each gets a 400 problem and the log does not grow.
func TestStrictDecoding(t *testing.T) {
	a, execID := newTestAPI(t, nil)
	hs := httptest.NewServer(a.srv.Handler())
	defer hs.Close()
	p := &principalAPI{t: t, url: hs.URL}
	headBefore, _ := a.store.Head(t.Context())
	for _, c := range []struct {
		method, path, body, want string
	}{
		{"POST", "/api/v1/executions", `{"Action":"demo","input":{}}`, `did you mean "action"`},
		{"POST", "/api/v1/executions", `{"action":"demo","INPUT":{}}`, `did you mean "input"`},
		{"POST", "/api/v1/executions", `{"action":"demo","action":"other","input":{}}`, `names the key "action" twice`},
		{"POST", "/api/v1/executions", `{"action":"demo","input":{"seconds":1,"seconds":2}}`, `"input" names the key "seconds" twice`},
		{"POST", "/api/v1/executions", `{"action":"demo","input":{"a":{"b":1,"b":1}}}`, `"a" names the key "b" twice`},
		{"POST", "/api/v1/executions", `{"action":"demo","input":{},"with_items":[{"x":1,"x":2}]}`, `names the key "x" twice`},
		{"POST", "/api/v1/executions", `{"action":"demo","input":null}`, "input must be a JSON object"},
		{"POST", "/api/v1/executions", `{"action":"demo","input":[1]}`, "input must be a JSON object"},
		{"POST", "/api/v1/executions", `{"action":"demo","input":"x"}`, "input must be a JSON object"},
		{"POST", "/api/v1/executions", `{"action":"demo","input":3}`, "input must be a JSON object"},
		{"POST", "/api/v1/executions", `{"action":"demo","input":true}`, "input must be a JSON object"},
		{"POST", "/api/v1/actions", `{"ref":"x","Runner":"core.noop"}`, `did you mean "runner"`},
		{"POST", "/api/v1/actions", `{"ref":"x","runner":"core.noop","rate_limit":{"Count":1,"per_seconds":1}}`, `did you mean "count"`},
		{"POST", "/api/v1/actions", `{"ref":"x","runner":"core.noop","runner_config":{"a":1,"a":2}}`, `names the key "a" twice`},
		{"PUT", "/api/v1/actions/demo/policy", `{"runner":"core.noop","runner":"core.sleep"}`, "twice"},
		{"POST", "/api/v1/executions/" + execID + "/cancel", `{"Reason":"x"}`, `did you mean "reason"`},
		{"POST", "/api/v1/actions/demo/pause", `{"reason":"a","reason":"b"}`, "twice"},
	} {
		status, _, body := p.do("", c.method, c.path, c.body)
		var prob api.Problem
		_ = json.Unmarshal(body, &prob)
		if status != http.StatusBadRequest || !strings.Contains(prob.Detail, c.want) {
			t.Errorf("%s %s %s: %d %s, want 400 saying %q", c.method, c.path, c.body, status, body, c.want)
		}
	}
	if head, _ := a.store.Head(t.Context()); head != headBefore {
		t.Errorf("refused bodies wrote %d events", head-headBefore)
	}
	// what stays allowed: no input, an object, keys that differ only in case
	// inside input (for a runner that reads any input: demo's core.sleep
	// refuses unknown fields when the execution is requested)
	if status, _, resp := p.do("", "POST", "/api/v1/actions", `{"ref":"any","runner":"core.noop"}`); status != http.StatusCreated {
		t.Fatalf("define any: %d %s", status, resp)
	}
	for _, body := range []string{`{"action":"any"}`, `{"action":"any","input":{}}`, `{"action":"any","input":{"a":1,"A":2}}`} {
		if status, _, resp := p.do("", "POST", "/api/v1/executions", body); status != http.StatusAccepted {
			t.Errorf("%s: %d %s, want 202", body, status, resp)
		}
	}
}
