package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/internal/feedproxy"
)

// Tokens of the test server.
const (
	adminToken  = "admin-token-0123456789"
	readerToken = "reader-token-0123456789"
)

// startTestServer runs `turnstile serve` in this process (the embedded
// store in a temporary directory, two workers, an admin and a reader token)
// and returns its URL once it listens; it stops at the end of the test.
func startTestServer(t *testing.T) string {
	t.Helper()
	return startTestServerIn(t, t.TempDir()) // here, not in the goroutine: removed after serve has stopped (cleanups run last in, first out)
}

// startTestServerIn is startTestServer with its data in dir.
func startTestServerIn(t *testing.T, dir string) string {
	t.Helper()
	url, _ := serveInProcess(t, "--addr", "127.0.0.1:0", "--data", dir, "--workers", "2", "--slots", "4",
		"--token", "admin:"+adminToken, "--token", "reader:"+readerToken)
	return url
}

// serveInProcess runs `turnstile serve` with args in this process and
// returns its URL once it listens, and stop, which stops it and fails the
// test unless serve exits 0. stop runs at the end of the test if it has not
// run before; a directory serve uses must be made before the call, so that
// it is removed only after serve has stopped.
func serveInProcess(t *testing.T, args ...string) (url string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &serveLog{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"serve"}, args...), io.Discard, logs)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("turnstile serve: exit %d\n%s", code, logs)
			}
		})
	}
	t.Cleanup(stop)
	deadline := time.After(30 * time.Second)
	for {
		if m := servedAt.FindStringSubmatch(logs.String()); m != nil {
			return "http://" + m[1], stop
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("turnstile serve: exit %d before serving\n%s", code, logs)
		case <-deadline:
			t.Fatalf("turnstile serve is not serving after 30s\n%s", logs)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// servedAt finds the listening address in serve's log.
var servedAt = regexp.MustCompile(`msg="turnstile serving" addr=(\S+)`)

// serveLog is serve's log output, safe to read while serve writes it.
type serveLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *serveLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *serveLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// cli runs the turnstile command line against server with the admin token.
func cli(t *testing.T, server string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return cliAs(t, server, adminToken, args...)
}

func cliAs(t *testing.T, server, token string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append(args, "--server", server, "--token", token)
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// mustCLI runs a command that must succeed and returns its output.
func mustCLI(t *testing.T, server string, args ...string) string {
	t.Helper()
	code, out, errOut := cli(t, server, args...)
	if code != 0 {
		t.Fatalf("turnstile %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// wantExit runs a command and checks its exit code and that its stderr
// matches pattern.
func wantExit(t *testing.T, server string, code int, pattern string, args ...string) string {
	t.Helper()
	got, out, errOut := cli(t, server, args...)
	if got != code || !regexp.MustCompile(pattern).MatchString(errOut) {
		t.Errorf("turnstile %s: exit %d, stderr %q; want exit %d and stderr matching %q\nstdout: %s", strings.Join(args, " "), got, errOut, code, pattern, out)
	}
	return out
}

func decode[T any](t *testing.T, doc string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("not one JSON document (%v): %q", err, doc)
	}
	return v
}

// field matches a "name: value" line of a human key/value output.
func field(name, value string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `:\s+` + regexp.QuoteMeta(value) + `$`)
}

func TestClientActions(t *testing.T) {
	t.Parallel()
	srv := startTestServer(t)

	out := mustCLI(t, srv, "actions", "create", "--ref", "demo.sleep", "--runner", "core.sleep", "--max-concurrent", "2",
		"--timeout", "1m", "--queue-timeout", "90", "--rate-limit", "100/2", "--concurrency-key", "customer", "--on-limit", "reject")
	for name, value := range map[string]string{"ref": "demo.sleep", "runner": "core.sleep", "max_concurrent": "2", "timeout": "60s",
		"queue_timeout": "90s", "rate_limit": "100 per 2s", "concurrency_key": "customer", "on_limit": "reject", "paused": "false"} {
		if !field(name, value).MatchString(out) {
			t.Errorf("actions create: no %q line with %q in\n%s", name, value, out)
		}
	}
	// The same definition again is fine; a different one is a conflict.
	mustCLI(t, srv, "actions", "create", "--ref", "demo.sleep", "--runner", "core.sleep", "--max-concurrent", "2",
		"--timeout", "60", "--queue-timeout", "1m30s", "--rate-limit", "100/2", "--concurrency-key", "customer", "--on-limit", "reject")
	wantExit(t, srv, exitNegative, `^turnstile: action "demo.sleep" is already defined with a different policy.* \(409\)\n$`,
		"actions", "create", "--ref", "demo.sleep", "--runner", "core.noop")

	// A policy file, with a flag over one of its fields.
	file := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(file, []byte(`{"ref":"demo.echo","runner":"core.echo","max_concurrent":3,"max_attempts":5}`), 0o600); err != nil {
		t.Fatal(err)
	}
	a := decode[wire.Action](t, mustCLI(t, srv, "actions", "create", "--file", file, "--max-attempts", "7", "--json"))
	if a.Ref != "demo.echo" || a.Runner != "core.echo" || a.MaxConcurrent != 3 || a.MaxAttempts != 7 {
		t.Errorf("actions create --file: %+v", a)
	}
	if err := os.WriteFile(file, []byte(`{"ref":"x","runner":"core.echo","max_concurency":3}`), 0o600); err != nil {
		t.Fatal(err)
	}
	wantExit(t, srv, exitUsage, `unknown field "max_concurency"`, "actions", "create", "--file", file)

	// policy changes only the fields it is given.
	a = decode[wire.Action](t, mustCLI(t, srv, "actions", "policy", "demo.sleep", "--max-concurrent", "5", "--json"))
	if a.MaxConcurrent != 5 || a.Runner != "core.sleep" || a.TimeoutSeconds != 60 || a.ConcurrencyKey != "customer" || a.Version != 1 {
		t.Errorf("actions policy --max-concurrent 5: %+v", a)
	}

	list := mustCLI(t, srv, "actions", "list")
	if !regexp.MustCompile(`(?m)^REF\s+RUNNER`).MatchString(list) ||
		!regexp.MustCompile(`(?m)^demo\.echo\s+core\.echo\s+3\s`).MatchString(list) ||
		!regexp.MustCompile(`(?m)^demo\.sleep\s+core\.sleep\s+5\s`).MatchString(list) {
		t.Errorf("actions list:\n%s", list)
	}
	all := decode[struct{ Actions []wire.Action }](t, mustCLI(t, srv, "actions", "list", "--json"))
	if len(all.Actions) != 2 {
		t.Errorf("actions list --json: %+v", all)
	}

	if out := mustCLI(t, srv, "actions", "pause", "demo.sleep", "--reason", "maintenance"); !field("paused", "true").MatchString(out) {
		t.Errorf("actions pause:\n%s", out)
	}
	if out := mustCLI(t, srv, "actions", "resume", "demo.sleep"); !field("paused", "false").MatchString(out) {
		t.Errorf("actions resume:\n%s", out)
	}
	if a := decode[wire.Action](t, mustCLI(t, srv, "actions", "get", "demo.sleep", "--json")); a.Paused || a.Ref != "demo.sleep" {
		t.Errorf("actions get: %+v", a)
	}

	wantExit(t, srv, exitNotFound, `^turnstile: action "nope" is not defined \(404\)\n$`, "actions", "get", "nope")
	wantExit(t, srv, exitUsage, `\(400\)`, "actions", "create", "--ref", "bad ref", "--runner", "core.noop")
	wantExit(t, srv, exitUsage, `needs --ref and --runner`, "actions", "create", "--ref", "x")
	wantExit(t, srv, exitUsage, `N/SECONDS`, "actions", "create", "--ref", "x", "--runner", "core.noop", "--rate-limit", "fast")
	if code, _, errOut := cliAs(t, srv, readerToken, "actions", "create", "--ref", "x", "--runner", "core.noop"); code != exitFailure || !strings.Contains(errOut, "(403)") {
		t.Errorf("a reader defining an action: exit %d, %q", code, errOut)
	}
	if code, _, errOut := cliAs(t, srv, "wrong-token-0123456789", "actions", "list"); code != exitFailure || !strings.Contains(errOut, "(401)") {
		t.Errorf("a wrong token: exit %d, %q", code, errOut)
	}
}

func TestClientExecutions(t *testing.T) {
	t.Parallel()
	srv := startTestServer(t)
	mustCLI(t, srv, "actions", "create", "--ref", "demo.sleep", "--runner", "core.sleep", "--max-concurrent", "4")
	mustCLI(t, srv, "actions", "create", "--ref", "demo.fail", "--runner", "core.fail")

	// request, then wait: completed is exit 0.
	id := strings.TrimSpace(mustCLI(t, srv, "exec", "request", "demo.sleep", "--input", `{"seconds":0.05}`))
	if !regexp.MustCompile(`^[0-9a-f-]{36}$`).MatchString(id) {
		t.Fatalf("exec request printed %q, want an id", id)
	}
	out := mustCLI(t, srv, "exec", "wait", id)
	if !field("status", "completed").MatchString(out) || !field("result", `{"slept_seconds":0.05}`).MatchString(out) {
		t.Errorf("exec wait:\n%s", out)
	}
	x := decode[wire.Execution](t, mustCLI(t, srv, "exec", "get", id, "--json"))
	if x.ID != id || x.Status != "completed" || x.Action != "demo.sleep" || x.Attempt != 1 {
		t.Errorf("exec get: %+v", x)
	}
	if out := mustCLI(t, srv, "exec", "get", id); !field("status", "completed").MatchString(out) || !field("action", "demo.sleep").MatchString(out) {
		t.Errorf("exec get:\n%s", out)
	}

	// request --wait of a failing one: exit 1, one JSON document.
	code, out, errOut := cli(t, srv, "exec", "request", "demo.fail", "--input", `{"message":"boom"}`, "--wait", "--json")
	failed := decode[wire.Execution](t, out)
	if code != exitNegative || failed.Status != "failed" || failed.Error != "boom" || !strings.Contains(errOut, "execution "+failed.ID+" failed") {
		t.Errorf("exec request --wait of core.fail: exit %d, %+v, stderr %q", code, failed, errOut)
	}

	// with_items: one child per item, a window of 2, the parent completes
	// once every child has.
	mustCLI(t, srv, "actions", "create", "--ref", "demo.items", "--runner", "core.sleep", "--max-concurrent", "4")
	parent := decode[wire.Execution](t, mustCLI(t, srv, "exec", "request", "demo.items", "--input", `{"seconds":0.01}`,
		"--with-items", `[{},{"seconds":0.02},{}]`, "--concurrency", "2", "--wait", "--json"))
	if parent.Status != "completed" || len(parent.Children) != 3 || parent.Concurrency != 2 {
		t.Errorf("exec request --with-items: %+v", parent)
	}
	wantExit(t, srv, exitUsage, "not a JSON array", "exec", "request", "demo.items", "--with-items", `{"a":1}`)
	wantExit(t, srv, exitUsage, "needs --with-items", "exec", "request", "demo.items", "--concurrency", "2")

	// The same idempotency key answers the same execution.
	first := strings.TrimSpace(mustCLI(t, srv, "exec", "request", "demo.sleep", "--idempotency-key", "k-1", "--input", `{"seconds":0}`))
	if again := strings.TrimSpace(mustCLI(t, srv, "exec", "request", "demo.sleep", "--idempotency-key", "k-1", "--input", `{"seconds":0}`)); again != first {
		t.Errorf("the same idempotency key: %s, then %s", first, again)
	}
	wantExit(t, srv, exitNegative, `\(409\)`, "exec", "request", "demo.sleep", "--idempotency-key", "k-1", "--input", `{"seconds":1}`)

	// Cancel a sleeping one; waiting then says cancelled (exit 1).
	sleeper := strings.TrimSpace(mustCLI(t, srv, "exec", "request", "demo.sleep", "--input", `{"seconds":60}`))
	wantExit(t, srv, exitFailure, `^turnstile: execution \S+ is still \w+ after 500ms: gave up waiting\n$`, "exec", "wait", sleeper, "--timeout", "500ms")
	if out := mustCLI(t, srv, "exec", "cancel", sleeper, "--reason", "enough"); !strings.HasPrefix(out, "cancellation requested: "+sleeper) {
		t.Errorf("exec cancel: %q", out)
	}
	out = wantExit(t, srv, exitNegative, `^turnstile: execution \S+ cancelled\n$`, "exec", "wait", sleeper, "--timeout", "30s")
	if !field("status", "cancelled").MatchString(out) {
		t.Errorf("exec wait of a cancelled execution:\n%s", out)
	}
	wantExit(t, srv, exitNegative, `has already ended.*\(409\)`, "exec", "cancel", sleeper)

	// list, newest first, paged.
	page := decode[struct {
		Executions []wire.Execution
		Next       string
	}](t, mustCLI(t, srv, "exec", "list", "--action", "demo.sleep", "--json"))
	var ids []string
	for _, x := range page.Executions {
		ids = append(ids, x.ID)
	}
	if want := []string{sleeper, first, id}; strings.Join(ids, " ") != strings.Join(want, " ") || page.Next != "" {
		t.Errorf("exec list --action demo.sleep: %v (next %q), want %v", ids, page.Next, want)
	}
	code, out, errOut = cli(t, srv, "exec", "list", "--limit", "1")
	if code != 0 || !strings.Contains(out, sleeper) || strings.Contains(out, first) || errOut != "more: --after "+sleeper+"\n" {
		t.Errorf("exec list --limit 1: exit %d\n%s\nstderr %q", code, out, errOut)
	}
	if out := mustCLI(t, srv, "exec", "list", "--status", "failed"); !regexp.MustCompile(`(?m)^\S+\s+demo\.fail\s+failed\s+1\s`).MatchString(out) {
		t.Errorf("exec list --status failed:\n%s", out)
	}

	// events: the audit trail, in order.
	code, evs, errOut := cli(t, srv, "exec", "events", id)
	if code != 0 || errOut != "" || !regexp.MustCompile(`(?s)execution\.requested.*execution\.scheduling.*execution\.scheduled.*execution\.running.*execution\.completed`).MatchString(evs) {
		t.Errorf("exec events: exit %d\n%s\nstderr %q", code, evs, errOut)
	}
	if code, _, errOut := cli(t, srv, "exec", "events", id, "--limit", "2"); code != 0 || errOut != "more: --from 2\n" {
		t.Errorf("exec events --limit 2: exit %d, stderr %q", code, errOut)
	}

	wantExit(t, srv, exitNotFound, `^turnstile: no execution "nope" \(404\)\n$`, "exec", "get", "nope")
	wantExit(t, srv, exitNotFound, `\(404\)`, "exec", "wait", "nope")
	wantExit(t, srv, exitNotFound, `\(404\)`, "exec", "cancel", "nope")
	wantExit(t, srv, exitNotFound, `\(404\)`, "exec", "explain", "nope")
	wantExit(t, srv, exitNotFound, `\(404\)`, "exec", "request", "no.such.action")
	wantExit(t, srv, exitUsage, `status "bogus" is not one of .*\(400\)`, "exec", "list", "--status", "bogus")
	wantExit(t, srv, exitUsage, `not a JSON object`, "exec", "request", "demo.sleep", "--input", "[1]")

	// watch: the executions feed from the start, one JSON object per line.
	code, out, errOut = cli(t, srv, "watch", "executions", "--from", "0", "--count", "3", "--json")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("watch executions --count 3: exit %d, %d lines\n%s\nstderr %q", code, len(lines), out, errOut)
	}
	for _, l := range lines {
		if x := decode[wire.Execution](t, l); x.ID == "" || x.Status == "" {
			t.Errorf("watch executions: %q", l)
		}
	}
	out = mustCLI(t, srv, "watch", "queue-stats", "--action", "demo.fail", "--from", "0", "--count", "1")
	if !regexp.MustCompile(`^position=\d+ action=demo\.fail queue=0 active=0 max=1 enqueued=1 completed=0 failed=1 `).MatchString(out) {
		t.Errorf("watch queue-stats: %q", out)
	}
}

// TestClientWatchReconnects drops a feed's connection: watch resumes after
// the last id it received, without a gap or a duplicate.
func TestClientWatchReconnects(t *testing.T) {
	t.Parallel()
	upstream := startTestServer(t)
	drop := feedproxy.Start(t, upstream, "/api/v1/feeds/events", 2)
	srv := drop.URL
	mustCLI(t, srv, "actions", "create", "--ref", "demo.noop", "--runner", "core.noop")
	mustCLI(t, srv, "exec", "request", "demo.noop", "--wait")

	code, out, errOut := cli(t, srv, "watch", "events", "--from", "0", "--count", "6", "--json")
	if code != 0 {
		t.Fatalf("watch events: exit %d\n%s\nstderr %q", code, out, errOut)
	}
	var positions []string
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var e struct{ Position uint64 }
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("watch events --json: %q: %v", l, err)
		}
		positions = append(positions, strconv.FormatUint(e.Position, 10))
	}
	if got := strings.Join(positions, " "); got != "0 1 2 3 4 5" {
		t.Errorf("watch events across a dropped connection: positions %s, want 0 1 2 3 4 5", got)
	}
	if ids := drop.LastIDs(); len(ids) != 2 || ids[0] != "" || ids[1] != "1" {
		t.Errorf("feed requests' Last-Event-ID: %q, want the first without and the second after id 1", ids)
	}
	if !strings.Contains(errOut, "reconnecting after id 1") {
		t.Errorf("stderr %q does not say it reconnects", errOut)
	}
}

// TestClientEnvironment runs a client configured only by the environment.
func TestClientEnvironment(t *testing.T) {
	srv := startTestServer(t)
	t.Setenv("TURNSTILE_SERVER", srv+"/")
	t.Setenv("TURNSTILE_TOKEN", readerToken)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"actions", "list"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "REF") {
		t.Errorf("actions list: exit %d\n%s\nstderr %q", code, out.String(), errOut.String())
	}
	t.Setenv("TURNSTILE_TOKEN", "")
	if code := run(context.Background(), []string{"actions", "list"}, &out, &errOut); code != exitFailure || !strings.Contains(errOut.String(), "(401)") {
		t.Errorf("actions list without a token: exit %d, stderr %q", code, errOut.String())
	}
}

func TestClientUsage(t *testing.T) {
	t.Parallel()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	for _, tc := range []struct {
		args    []string
		code    int
		pattern string
	}{
		{[]string{"exec"}, exitUsage, `usage: turnstile exec cancel\|events\|explain\|get\|list\|request\|wait`},
		{[]string{"exec", "frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"exec", "get"}, exitUsage, `usage: turnstile exec get ID \(got 0 arguments\)`},
		{[]string{"exec", "get", "a", "b"}, exitUsage, `\(got 2 arguments\)`},
		{[]string{"exec", "get", "a", "--no-such-flag"}, exitUsage, `flag provided but not defined`},
		{[]string{"exec", "wait", "a", "--timeout", "soon"}, exitUsage, `invalid value "soon"`},
		{[]string{"exec", "get", "a", "--server", "ftp://x"}, exitUsage, `must be an http:// or https:// URL`},
		{[]string{"actions", "create", "--ref", "x", "--runner", "y", "--timeout", "forever"}, exitUsage, `want seconds`},
		{[]string{"watch", "nothing"}, exitUsage, `unknown command "nothing"`},
		{[]string{"exec", "get", "a", "--server", gone.URL}, exitFailure, `connection refused`},
		{[]string{"watch", "events", "--server", gone.URL}, exitFailure, `connection refused`},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errOut)
		if code != tc.code || !regexp.MustCompile(tc.pattern).MatchString(errOut.String()) {
			t.Errorf("turnstile %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, errOut.String(), tc.code, tc.pattern)
		}
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"watch", "help"}, &out, io.Discard); code != 0 || !strings.Contains(out.String(), "Exit codes:") {
		t.Errorf("watch help: exit %d, %q", code, out.String())
	}
}
