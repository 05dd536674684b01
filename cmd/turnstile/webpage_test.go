package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestServeRefusesWebPages: `turnstile serve` without tokens, on loopback,
// with core.shell on, gets what a web page in a browser on the same host
// can make it send: cross-site "simple" requests (text/plain or no body,
// so no preflight) with the page's Origin, and after a DNS rebinding with
// the page's Host. It refuses each, and the log does not move. The same
// definition sent as a local client sends it is accepted: the refusals are
// the guards', not the definition's.
func TestServeRefusesWebPages(t *testing.T) {
	args := []string{"--runners", "core.noop,core.echo,core.shell"}
	if os.Geteuid() == 0 {
		args = append(args, "--shell-user", "nobody")
	}
	srv := startRestartable(t, args...)
	base := srv.url()
	port := srv.addr[strings.LastIndex(srv.addr, ":")+1:]
	send := func(method, path, host, body string, header ...string) (int, []byte) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, base+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		data, _ := io.ReadAll(res.Body)
		return res.StatusCode, data
	}
	head := func() uint64 {
		t.Helper()
		status, data := send("GET", "/api/v1/log", "", "")
		var st struct{ Head uint64 }
		if status != 200 || json.Unmarshal(data, &st) != nil {
			t.Fatalf("GET /api/v1/log: %d %s", status, data)
		}
		return st.Head
	}
	// An action and an execution for the page to pause and cancel.
	if status, data := send("POST", "/api/v1/actions", "", `{"ref":"web.wait","runner":"core.echo"}`, "Content-Type", "application/json"); status != 201 {
		t.Fatalf("define web.wait: %d %s", status, data)
	}
	send("POST", "/api/v1/actions/web.wait/pause", "", "")
	status, data := send("POST", "/api/v1/executions", "", `{"action":"web.wait","input":{}}`, "Content-Type", "application/json")
	var acc struct{ ID string }
	if status != 202 || json.Unmarshal(data, &acc) != nil {
		t.Fatalf("request web.wait: %d %s", status, data)
	}

	const evil = "http://evil.example"
	rebound := "evil.example:" + port
	shell := `{"ref":"web.pwn","runner":"core.shell","runner_config":{"command":"/bin/sh","args":["-c","id"]}}`
	before := head()
	for _, tc := range []struct {
		name, method, path, host, body string
		header                         []string
		want                           int
	}{
		{"define core.shell, cross-site", "POST", "/api/v1/actions", "", shell, []string{"Content-Type", "text/plain", "Origin", evil}, 403},
		{"define core.shell, rebound", "POST", "/api/v1/actions", rebound, shell, []string{"Content-Type", "text/plain", "Origin", "http://" + rebound}, 421},
		{"request it, cross-site", "POST", "/api/v1/executions", "", `{"action":"web.pwn","input":{}}`, []string{"Content-Type", "text/plain", "Origin", evil}, 403},
		{"request it, rebound", "POST", "/api/v1/executions", rebound, `{"action":"web.pwn","input":{}}`, []string{"Content-Type", "text/plain", "Origin", "http://" + rebound}, 421},
		{"resume, cross-site, no body", "POST", "/api/v1/actions/web.wait/resume", "", "", []string{"Origin", evil}, 403},
		{"cancel, cross-site, no body", "POST", "/api/v1/executions/" + acc.ID + "/cancel", "", "", []string{"Origin", evil}, 403},
		{"text/plain without an Origin", "POST", "/api/v1/actions", "", shell, []string{"Content-Type", "text/plain"}, 415},
		{"a rebound page reads", "GET", "/api/v1/executions/" + acc.ID, rebound, "", nil, 421},
	} {
		status, data := send(tc.method, tc.path, tc.host, tc.body, tc.header...)
		if status != tc.want || !strings.Contains(string(data), `"status":`) {
			t.Errorf("%s: %d %s, want a %d problem", tc.name, status, data, tc.want)
		}
		if strings.Contains(string(data), "web.wait") {
			t.Errorf("%s: the refusal shows the server's data: %s", tc.name, data)
		}
	}
	if after := head(); after != before {
		t.Errorf("the log moved from %d to %d", before, after)
	}
	if status, data := send("GET", "/api/v1/executions/"+acc.ID, "", ""); status != 200 || !strings.Contains(string(data), `"requested"`) && !strings.Contains(string(data), `"waiting"`) {
		t.Errorf("the execution after the page's attempts: %d %s", status, data)
	}
	// As a local client sends it, the definition is accepted.
	if status, data := send("POST", "/api/v1/actions", "localhost:"+port, shell, "Content-Type", "application/json"); status != 201 {
		t.Errorf("the definition from a local client: %d %s", status, data)
	}
}
