package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/api"
)

// guardServer is a real server over HTTP without tokens (or with cfg's),
// as `serve` runs on loopback.
func guardServer(t *testing.T, cfg api.Config) (*testAPI, string, string) {
	t.Helper()
	a, execID := startAPI(t, cfg)
	hs := httptest.NewServer(a.srv.Handler())
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	return a, hs.URL, execID
}

// rawCall sends a request as a browser (or anyone) may: host replaces the
// Host header when not "", header holds pairs.
func rawCall(t *testing.T, base, method, path, host, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // a feed that opens is cut
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

// TestBrowserAttackRefused sends what a web page can make a browser send to
// a server without tokens on loopback: cross-site "simple" requests
// (text/plain or no body, no preflight) with a foreign Origin, and after a
// DNS rebinding with a foreign Host. Each is refused with a problem
// document and the log does not move.
func TestBrowserAttackRefused(t *testing.T) {
	a, base, execID := guardServer(t, api.Config{})
	u, _ := url.Parse(base)
	port := u.Port()
	evilHost := "evil.example:" + port
	const evil = "http://evil.example"
	shell := `{"ref":"pwn","runner":"core.shell","runner_config":{"command":"/bin/sh","args":["-c","id > /tmp/pwned"]}}`
	cases := []struct {
		name, method, path, host, body string
		header                         []string
		want                           int
	}{
		{"define core.shell, rebound", "POST", "/api/v1/actions", evilHost, shell, []string{"Content-Type", "text/plain", "Origin", evil}, 421},
		{"define core.shell, cross-site", "POST", "/api/v1/actions", "", shell, []string{"Content-Type", "text/plain;charset=UTF-8", "Origin", evil}, 403},
		{"define core.shell, as JSON, cross-site", "POST", "/api/v1/actions", "", shell, []string{"Content-Type", "application/json", "Origin", evil}, 403},
		{"request it, rebound", "POST", "/api/v1/executions", evilHost, `{"action":"pwn","input":{}}`, []string{"Content-Type", "text/plain", "Origin", evil}, 421},
		{"request it, cross-site", "POST", "/api/v1/executions", "", `{"action":"demo","input":{"seconds":1}}`, []string{"Content-Type", "text/plain", "Origin", evil}, 403},
		{"pause, no body, no type, cross-site", "POST", "/api/v1/actions/demo/pause", "", "", []string{"Origin", evil}, 403},
		{"pause, a form, cross-site", "POST", "/api/v1/actions/demo/pause", "", "reason=x", []string{"Content-Type", "application/x-www-form-urlencoded", "Origin", evil}, 403},
		{"cancel, no body, no type, cross-site", "POST", "/api/v1/executions/" + execID + "/cancel", "", "", []string{"Origin", evil}, 403},
		{"cancel, rebound", "POST", "/api/v1/executions/" + execID + "/cancel", evilHost, "", []string{"Origin", "http://" + evilHost}, 421},
		{"cancel from a sandboxed frame", "POST", "/api/v1/executions/" + execID + "/cancel", "", "", []string{"Origin", "null"}, 403},
		{"a rebound page reads", "GET", "/api/v1/executions/" + execID, evilHost, "", nil, 421},
		{"a rebound page reads the dashboard", "GET", "/ui/", evilHost, "", nil, 421},
		{"a cross-site page opens a feed", "GET", "/api/v1/feeds/events", "", "", []string{"Origin", evil}, 403},
		// Without an Origin (not a browser, or an old one), the type still decides.
		{"text/plain, no Origin", "POST", "/api/v1/executions", "", `{"action":"demo","input":{"seconds":1}}`, []string{"Content-Type", "text/plain"}, 415},
		{"a form, no Origin", "POST", "/api/v1/actions/demo/pause", "", "reason=x", []string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
		{"multipart, no Origin", "POST", "/api/v1/actions/demo/pause", "", "--b--", []string{"Content-Type", "multipart/form-data; boundary=b"}, 415},
		{"a body, no type", "PUT", "/api/v1/actions/demo/policy", "", `{"runner":"core.sleep"}`, nil, 415},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := a.store.Head(context.Background())
			status, h, body := rawCall(t, base, tc.method, tc.path, tc.host, tc.body, tc.header...)
			after, _ := a.store.Head(context.Background())
			if status != tc.want {
				t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, status, body, tc.want)
			}
			var p api.Problem
			if ct := h.Get("Content-Type"); ct != "application/problem+json" || json.Unmarshal(body, &p) != nil || p.Status != tc.want {
				t.Errorf("not a problem document of status %d: %s %s", tc.want, ct, body)
			}
			if after != before {
				t.Errorf("the log moved from %d to %d", before, after)
			}
			if bytes.Contains(body, []byte(`"demo"`)) || bytes.Contains(body, []byte("seconds")) {
				t.Errorf("the refusal shows the server's data: %s", body)
			}
		})
	}
}

// TestBrowserGuardLetsLocalCallersIn: the same server serves its own pages,
// local clients (any loopback address, a JSON type with parameters or a
// +json suffix, a body-less POST with no type), and an origin
// --cors-origin names; with tokens, any Host.
func TestBrowserGuardLetsLocalCallersIn(t *testing.T) {
	a, base, execID := guardServer(t, api.Config{CORSOrigins: []string{"https://dash.example.com"}})
	u, _ := url.Parse(base)
	port := u.Port()
	for _, tc := range []struct {
		name, method, path, host, body string
		header                         []string
		want                           int
	}{
		{"localhost", "GET", "/api/v1/actions/demo", "localhost:" + port, "", nil, 200},
		{"localhost, no port", "GET", "/api/v1/actions/demo", "localhost", "", nil, 200},
		{"::1", "GET", "/api/v1/actions/demo", "[::1]:" + port, "", nil, 200},
		{"::1, no port", "GET", "/api/v1/actions/demo", "[::1]", "", nil, 200},
		{"127.0.0.2", "GET", "/api/v1/actions/demo", "127.0.0.2:" + port, "", nil, 200},
		{"own page, same origin", "POST", "/api/v1/actions/demo/pause", "", `{"reason":"r"}`, []string{"Content-Type", "application/json", "Origin", "http://127.0.0.1:" + port}, 200},
		{"own page by localhost", "POST", "/api/v1/actions/demo/resume", "localhost:" + port, "", []string{"Content-Type", "application/json", "Origin", "http://localhost:" + port}, 200},
		{"charset", "POST", "/api/v1/actions/demo/pause", "", `{}`, []string{"Content-Type", "application/json; charset=utf-8"}, 200},
		{"+json", "POST", "/api/v1/actions/demo/resume", "", `{}`, []string{"Content-Type", "application/merge-patch+json"}, 200},
		{"curl -X POST, no body, no type", "POST", "/api/v1/actions/demo/pause", "", "", nil, 200},
		{"an allowed origin", "POST", "/api/v1/executions/" + execID + "/cancel", "", "", []string{"Content-Type", "application/json", "Origin", "https://dash.example.com"}, 202},
		{"another localhost name", "GET", "/api/v1/actions/demo", "localhost.evil.example:" + port, "", nil, 421},
		{"127.0.0.1 with a foreign origin's port", "POST", "/api/v1/actions/demo/pause", "", "", []string{"Origin", "http://127.0.0.1:1"}, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if status, _, body := rawCall(t, base, tc.method, tc.path, tc.host, tc.body, tc.header...); status != tc.want {
				t.Errorf("%s %s (Host %q): %d %s, want %d", tc.method, tc.path, tc.host, status, body, tc.want)
			}
		})
	}
	_ = a

	// With tokens the Host is not checked (a page has no token), the
	// Origin and the type are.
	_, tbase, _ := guardServer(t, api.Config{Tokens: allTokens(t)})
	auth := "Bearer " + secrets[api.RoleAdmin]
	if status, _, body := rawCall(t, tbase, "GET", "/api/v1/actions/demo", "turnstile.example.com", "", "Authorization", auth); status != 200 {
		t.Errorf("with tokens, another Host: %d %s", status, body)
	}
	if status, _, body := rawCall(t, tbase, "POST", "/api/v1/actions/demo/pause", "turnstile.example.com", "", "Authorization", auth, "Origin", "http://evil.example"); status != 403 {
		t.Errorf("with tokens, a foreign Origin: %d %s", status, body)
	}
	if status, _, body := rawCall(t, tbase, "POST", "/api/v1/actions/demo/pause", "", "{}", "Authorization", auth, "Content-Type", "text/plain"); status != 415 {
		t.Errorf("with tokens, text/plain: %d %s", status, body)
	}
}
