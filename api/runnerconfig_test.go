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

// TestRunnerConfigValidatedOnDefine: a runner_config the built-in runner
// would refuse is a 400 problem naming it, and nothing is written; a good
// one is kept and shown back.
func TestRunnerConfigValidatedOnDefine(t *testing.T) {
	e := newE2E(t)
	e.mustJSON("POST", "/api/v1/actions", map[string]any{"ref": "rc.http", "runner": "core.http",
		"runner_config": map[string]any{"url": "https://api.example.com/v1/", "methods": []string{"GET"}}}, http.StatusCreated, nil)
	head, _ := e.store.Head(context.Background())
	cases := []struct {
		method, path, body string
		detail             string // in the problem's detail
	}{
		{"POST", "/api/v1/actions", `{"ref":"rc.a","runner":"core.shell","runner_config":{"command":"./x"}}`, "absolute path"},
		{"POST", "/api/v1/actions", `{"ref":"rc.a","runner":"core.shell","runner_config":{"args":["-c","id"]}}`, `"command" is required`},
		{"POST", "/api/v1/actions", `{"ref":"rc.a","runner":"core.shell","runner_config":{"command":"/bin/echo","shell":true}}`, `unknown field "shell"`},
		{"POST", "/api/v1/actions", `{"ref":"rc.a","runner":"core.shell","runner_config":["/bin/sh"]}`, "runner_config must be a JSON object"},
		{"POST", "/api/v1/actions", `{"ref":"rc.a","runner":"core.shell","runner_config":"sh -c id"}`, "runner_config must be a JSON object"},
		{"POST", "/api/v1/actions", `{"ref":"rc.a","runner":"core.http","runner_config":{"url":"file:///etc/passwd"}}`, "scheme must be http or https"},
		{"POST", "/api/v1/actions", `{"ref":"rc.a","runner":"core.http","runner_config":{"methods":["TRACE"]}}`, `"methods"`},
		{"POST", "/api/v1/actions", `{"ref":"rc.a","runner":"core.echo","runner_config":{"x":1}}`, "takes no runner_config"},
		{"PUT", "/api/v1/actions/rc.http/policy", `{"runner":"core.http","runner_config":{"url":"https://x/?q=1"}}`, "no query"},
		{"PUT", "/api/v1/actions/rc.http/policy", `{"runner":"core.shell","runner_config":{"command":"/bin/echo","dir":"tmp"}}`, "absolute path"},
	}
	for _, c := range cases {
		st, h, b := e.do(c.method, c.path, c.body)
		var p api.Problem
		if st != http.StatusBadRequest || json.Unmarshal(b, &p) != nil || h.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(p.Detail, c.detail) {
			t.Errorf("%s %s %s: %d %s, want 400 with a problem containing %q", c.method, c.path, c.body, st, b, c.detail)
		}
	}
	if after, _ := e.store.Head(context.Background()); after != head {
		t.Errorf("refused definitions appended %d events", after-head)
	}

	// A good config is kept as defined, and shown back to readers.
	e.mustJSON("POST", "/api/v1/actions", map[string]any{"ref": "rc.shell", "runner": "core.shell",
		"runner_config": map[string]any{"command": "/usr/bin/convert", "args": []string{"-resize"}, "input_args": true}}, http.StatusCreated, nil)
	var a wire.Action
	e.mustJSON("GET", "/api/v1/actions/rc.shell", nil, http.StatusOK, &a)
	if string(a.RunnerConfig) != `{"args":["-resize"],"command":"/usr/bin/convert","input_args":true}` { // as sent (a Go map: sorted keys), compact
		t.Fatalf("runner_config shown as %s", a.RunnerConfig)
	}
	// Defining it again with the same config (other white space) is a repeat, not a conflict.
	st, _, b := e.do("POST", "/api/v1/actions", `{"ref":"rc.shell","runner":"core.shell","runner_config":{ "command" : "/usr/bin/convert", "args":["-resize"], "input_args":true }}`)
	if st != http.StatusOK && st != http.StatusCreated {
		t.Fatalf("repeat definition: %d %s", st, b)
	}
	// A different config is a different policy.
	if st, _, b := e.do("POST", "/api/v1/actions", `{"ref":"rc.shell","runner":"core.shell","runner_config":{"command":"/bin/sh"}}`); st != http.StatusConflict {
		t.Fatalf("redefinition with another command: %d %s, want 409", st, b)
	}
}
