package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestServeRunners: --runners chooses the built-in runners serve's workers
// offer. core.shell is off by default (no worker serves it, so its
// executions wait in their queue while later core.noop ones run), a bad
// list is a usage error, a root process
// must name --shell-user for core.shell, and with it on, the action's
// runner_config decides what runs.
func TestServeRunners(t *testing.T) {
	bin := turnstileBinary(t)
	out, err := exec.Command(bin, "serve", "--data", t.TempDir(), "--runners", "core.noop,core.nosuch").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "--runners") {
		t.Fatalf("serve --runners core.nosuch: %v, output:\n%s", err, out)
	}
	if os.Geteuid() == 0 {
		out, err := exec.Command(bin, "serve", "--data", t.TempDir(), "--runners", "core.shell").CombinedOutput()
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "ShellUser") {
			t.Fatalf("serve --runners core.shell as root without --shell-user: %v, output:\n%s", err, out)
		}
	}

	shell := map[string]any{"ref": "t.echo", "runner": "core.shell", "max_concurrent": 1,
		"runner_config": map[string]any{"command": "/bin/echo", "args": []string{"hello"}}}
	request := func(ctx context.Context, p *serveProc, def map[string]any) string {
		if code, err := call(ctx, "POST", p.url+"/api/v1/actions", def, nil, nil); err != nil || (code != 201 && code != 200) {
			t.Fatalf("define %v: %d %v", def["ref"], code, err)
		}
		var acc struct{ ID string }
		if _, err := call(ctx, "POST", p.url+"/api/v1/executions", map[string]any{"action": def["ref"], "input": map[string]any{}}, nil, &acc); err != nil {
			t.Fatal(err)
		}
		return acc.ID
	}
	wait := func(ctx context.Context, p *serveProc, id string) map[string]any {
		for {
			var x map[string]any
			if _, err := call(ctx, "GET", p.url+"/api/v1/executions/"+id, nil, nil, &x); err != nil {
				t.Fatal(err)
			}
			if s, _ := x["status"].(string); s == "completed" || s == "failed" {
				return x
			}
			if ctx.Err() != nil {
				t.Fatalf("execution %s did not end: %v", id, x)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := startServe(t, bin, t.TempDir())
	shellID := request(ctx, p, shell)
	noop := wait(ctx, p, request(ctx, p, map[string]any{"ref": "t.noop", "runner": "core.noop", "max_concurrent": 1}))
	var x map[string]any
	if _, err := call(ctx, "GET", p.url+"/api/v1/executions/"+shellID, nil, nil, &x); err != nil {
		t.Fatal(err)
	}
	p.stop(t)
	if noop["status"] != "completed" || x["status"] != "requested" {
		t.Fatalf("default runners: the later core.noop execution is %v, the core.shell one %v; want completed and still requested (no worker serves core.shell)", noop["status"], x)
	}

	extra := []string{"--runners", "core.noop,core.shell"}
	if os.Geteuid() == 0 {
		extra = append(extra, "--shell-user", "nobody")
	}
	p = startServe(t, bin, t.TempDir(), extra...)
	x = wait(ctx, p, request(ctx, p, shell))
	p.stop(t)
	if x["status"] != "completed" || !strings.Contains(toString(x["result"]), "hello") {
		t.Fatalf("core.shell enabled: %v, want completed with hello", x)
	}
}

func toString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}
