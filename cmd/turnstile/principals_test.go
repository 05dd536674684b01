package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestReplayAndAuditShowThePrincipal: serve with named tokens; alice
// requests and cancels, root defines; once serve stopped, `turnstile
// replay` names who asked for each API event and `turnstile audit` counts
// each principal's events (and finds the log lawful).
func TestReplayAndAuditShowThePrincipal(t *testing.T) {
	const alice, root = "alice-secret-0123456789", "root-secret-0123456789"
	var stderr strings.Builder
	if code := run(context.Background(), []string{"serve", "--data", t.TempDir(), "--cors-origin", "dash.example"}, io.Discard, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "scheme://host") {
		t.Fatalf("serve --cors-origin without a scheme: exit %d, %s", code, stderr.String())
	}
	data := t.TempDir()
	ctx := context.Background()
	url, stop := serveInProcess(t, "--addr", "127.0.0.1:0", "--data", data, "--workers", "1",
		"--token", "client:alice:"+alice, "--token", "admin:root:"+root, "--cors-origin", "https://dash.example")
	var acc struct{ ID string }
	for _, c := range []struct {
		token, method, path string
		body                any
		want                int
		out                 any
	}{
		{root, "POST", "/api/v1/actions", map[string]any{"ref": "who.sleep", "runner": "core.sleep"}, http.StatusCreated, nil},
		{alice, "POST", "/api/v1/executions", map[string]any{"action": "who.sleep", "input": map[string]any{"seconds": 30}}, http.StatusAccepted, &acc},
	} {
		if st, err := call(ctx, c.method, url+c.path, c.body, map[string]string{"Authorization": "Bearer " + c.token}, c.out); err != nil || st != c.want {
			t.Fatalf("%s %s: %d %v, want %d", c.method, c.path, st, err, c.want)
		}
	}
	if st, err := call(ctx, "POST", url+"/api/v1/executions/"+acc.ID+"/cancel", nil, map[string]string{"Authorization": "Bearer " + alice}, nil); err != nil || st != http.StatusAccepted {
		t.Fatalf("alice cancels her execution: %d %v", st, err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		var x struct{ Status string }
		if _, err := call(ctx, "GET", url+"/api/v1/executions/"+acc.ID, nil, map[string]string{"Authorization": "Bearer " + alice}, &x); err == nil && x.Status == "cancelled" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the execution did not end cancelled")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()

	var out strings.Builder
	if code := run(context.Background(), []string{"replay", "--data", data, "--stream", "execution-" + acc.ID}, &out, io.Discard); code != 0 {
		t.Fatalf("replay: exit %d", code)
	}
	for _, want := range []string{"execution.requested", "execution.cancel_requested"} {
		line := lineWith(out.String(), want)
		if !strings.Contains(line, " by alice ") {
			t.Errorf("replay's %s line does not name alice: %q", want, line)
		}
	}
	if line := lineWith(out.String(), "execution.running"); strings.Contains(line, " by ") {
		t.Errorf("a worker's event names a principal: %q", line)
	}
	out.Reset()
	if code := run(context.Background(), []string{"replay", "--data", data, "--stream", "action-who.sleep"}, &out, io.Discard); code != 0 || !strings.Contains(out.String(), " by root ") {
		t.Errorf("replay of the action: exit %d, no root in\n%s", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"audit", "--data", data}, &out, io.Discard); code != 0 {
		t.Fatalf("audit: exit %d\n%s", code, out.String())
	}
	if line := lineWith(out.String(), "principals:"); !strings.Contains(line, "alice:2") || !strings.Contains(line, "root:2") {
		t.Errorf("audit's principals line %q, want alice 2 (request, cancel) and root 2 (definition and its fence)", line)
	}
}

func lineWith(text, sub string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}
