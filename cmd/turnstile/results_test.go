package main

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestServeMaxResultBytes: serve --max-result-bytes bounds both the
// in-process runs (core.echo over it fails) and the remote workers'
// reports (413, nothing written; a result within it is then accepted); a
// bound out of range is a usage error (exit 2).
func TestServeMaxResultBytes(t *testing.T) {
	bin := turnstileBinary(t)
	for _, bad := range []string{"0", "786433"} {
		out, err := exec.Command(bin, "serve", "--data", t.TempDir(), "--max-result-bytes", bad).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "--max-result-bytes") {
			t.Errorf("serve --max-result-bytes %s: %v, output:\n%s", bad, err, out)
		}
	}
	p := startServe(t, bin, t.TempDir(), "--max-result-bytes", "1024")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	obj := func(n int) map[string]string { return map[string]string{"s": strings.Repeat("x", n-8)} } // n bytes of JSON
	must := func(code int, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(call(ctx, "POST", p.url+"/api/v1/actions", map[string]any{"ref": "echo", "runner": "core.echo"}, nil, nil))
	must(call(ctx, "POST", p.url+"/api/v1/actions", map[string]any{"ref": "far", "runner": "far.runner"}, nil, nil))
	var acc struct{ ID string }
	must(call(ctx, "POST", p.url+"/api/v1/executions", map[string]any{"action": "echo", "input": obj(1025)}, nil, &acc))
	var x struct {
		Status, Error string
		Result        any
	}
	for x.Status != "failed" && x.Status != "completed" && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
		must(call(ctx, "GET", p.url+"/api/v1/executions/"+acc.ID, nil, nil, &x))
	}
	if x.Status != "failed" || x.Result != nil || !strings.Contains(x.Error, "the limit is 1024") {
		t.Errorf("core.echo of 1025 bytes under --max-result-bytes 1024: %+v", x)
	}

	var sess struct{ Session string }
	must(call(ctx, "POST", p.url+"/api/v1/workers/register", map[string]any{"name": "far-1", "runners": []string{"far.runner"}, "slots": 1}, nil, &sess))
	auth := map[string]string{"Authorization": "Bearer " + sess.Session}
	must(call(ctx, "POST", p.url+"/api/v1/executions", map[string]any{"action": "far", "input": map[string]any{}}, nil, &acc))
	var polled struct{ Assignments []struct{ Execution string } }
	for len(polled.Assignments) == 0 && ctx.Err() == nil {
		must(call(ctx, "POST", p.url+"/api/v1/workers/far-1/poll", map[string]any{"wait_seconds": 5, "start": true}, auth, &polled))
	}
	code, err := call(ctx, "POST", p.url+"/api/v1/workers/far-1/report", map[string]any{"execution": acc.ID, "status": "completed", "result": obj(1025)}, auth, nil)
	if code != 413 || !strings.Contains(err.Error(), "result-too-large") {
		t.Errorf("a remote result of 1025 bytes: %d %v", code, err)
	}
	must(call(ctx, "POST", p.url+"/api/v1/workers/far-1/report", map[string]any{"execution": acc.ID, "status": "completed", "result": obj(1024)}, auth, nil))
	p.stop(t)
}
