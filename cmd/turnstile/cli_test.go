package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/client"
	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/projections"
)

// TestHelpEveryCommand: --help on every command exits 0 and prints its
// flags, an example and the exit codes.
func TestHelpEveryCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		flag string // one flag the help must list
	}{
		{[]string{"serve"}, "-addr"},
		{[]string{"executor"}, "-store"},
		{[]string{"worker"}, "-slots"},
		{[]string{"migrate"}, "-store"},
		{[]string{"healthcheck"}, "-timeout"},
		{[]string{"audit"}, "-data"},
		{[]string{"replay"}, "-as-of"},
		{[]string{"rebuild"}, "-server"},
		{[]string{"bench", "lifecycle"}, "-executions"},
		{[]string{"bench", "waiting"}, "-json"},
		{[]string{"bench", "restart"}, "-store"},
		{[]string{"version"}, "-json"},
		{[]string{"actions", "create"}, "-max-concurrent"},
		{[]string{"actions", "list"}, "-server"},
		{[]string{"actions", "policy"}, "-rate-limit"},
		{[]string{"exec", "request"}, "-idempotency-key"},
		{[]string{"exec", "get"}, "-as-of"},
		{[]string{"exec", "list"}, "-status"},
		{[]string{"exec", "wait"}, "-timeout"},
		{[]string{"watch", "events"}, "-count"},
		{[]string{"watch", "queue-stats"}, "-action"},
	} {
		for _, help := range []string{"--help", "-h"} {
			args := append(append([]string{}, tc.args...), help)
			var out, errOut bytes.Buffer
			code := run(context.Background(), args, &out, &errOut)
			text := out.String()
			if code != 0 || errOut.Len() > 0 || !strings.Contains(text, "usage: turnstile "+tc.args[0]) || !regexp.MustCompile(`\n  `+tc.flag+`[ \n]`).MatchString(text) ||
				!strings.Contains(text, "Example:\n  turnstile "+tc.args[0]) || !strings.Contains(text, "Exit codes:") || strings.Contains(text, "flag: help requested") {
				t.Errorf("turnstile %s: exit %d, want 0 and a usage on stdout that lists %s, an example and the exit codes:\n%s\nstderr: %s", strings.Join(args, " "), code, tc.flag, text, errOut.String())
			}
		}
	}
	for name, sc := range map[string]map[string]subcommand{"actions": actionsCommands, "exec": execCommands, "watch": watchCommands, "log": logCommands} {
		for sub := range sc {
			if c, _ := commandNamed(name + " " + sub); c.what == "" || c.example == "" {
				t.Errorf("turnstile %s %s --help does not say what it does or show an example (commands)", name, sub)
			}
		}
	}
	// A group's help is its own, and `help COMMAND` is COMMAND --help.
	helps := map[string]string{}
	for _, args := range [][]string{{"actions", "--help"}, {"exec", "--help"}, {"watch", "--help"}, {"bench", "--help"}, {"help", "serve"}, {"--help"}} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, &out, &errOut)
		text := out.String() + errOut.String()
		if code != 0 || !strings.Contains(text, "Exit codes:") {
			t.Errorf("turnstile %s: exit %d:\n%s", strings.Join(args, " "), code, text)
		}
		helps[args[0]] = text
	}
	if helps["actions"] == helps["watch"] || !strings.Contains(helps["watch"], "turnstile watch executions") || strings.Contains(helps["watch"], "actions create") {
		t.Errorf("actions --help and watch --help should differ:\n%s\n---\n%s", helps["actions"], helps["watch"])
	}
	if !strings.Contains(helps["help"], "-addr") {
		t.Errorf("help serve:\n%s", helps["help"])
	}
	// Every exit code is documented in turnstile --help.
	for _, code := range []string{"0  success", "1  a negative finding", "2  bad usage", "3  an operational failure", "4  not found", "5  refused for now (429)"} {
		if !strings.Contains(helps["--help"], code) {
			t.Errorf("turnstile --help does not document exit code %q", code)
		}
	}
	// A flag that does not exist is still bad usage.
	if code := run(context.Background(), []string{"serve", "--no-such-flag"}, io.Discard, io.Discard); code != 2 {
		t.Errorf("serve --no-such-flag: exit %d, want 2", code)
	}
}

// TestVersion builds the real binary and reads its version: the module's,
// the commit it was built from and the Go version, as `go version -m`
// reads them from the binary (the commit is there when the build could
// stamp it: a git checkout, -buildvcs not false).
func TestVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin := filepath.Join(t.TempDir(), "turnstile")
	if out, err := exec.Command("go", "build", "-o", bin, "-ldflags", "-X main.version=v9.8.7", ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	meta, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	wantCommit := ""
	if m := regexp.MustCompile(`(?m)^\s+build\s+vcs\.revision=(\S+)$`).FindSubmatch(meta); m != nil {
		wantCommit = string(m[1])
	}
	code, out, errOut := runCLI(ctx, t, bin, nil, "version", "--json")
	var v versionInfo
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("version --json: exit %d, %q %q", code, out, errOut)
	}
	if v.Go != runtime.Version() || v.Version != "v9.8.7" || v.Platform != runtime.GOOS+"/"+runtime.GOARCH || v.Commit != wantCommit {
		t.Errorf("version --json: %+v, want v9.8.7, commit %q and Go %s\n%s", v, wantCommit, runtime.Version(), meta)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, _ := runCLI(ctx, t, bin, nil, args...)
		if code != 0 || !strings.HasPrefix(out, "turnstile v9.8.7\n") || !strings.Contains(out, "go:       "+runtime.Version()) ||
			(wantCommit != "" && !strings.Contains(out, "commit:   "+wantCommit)) || (wantCommit == "" && !strings.Contains(out, "commit:   unknown")) {
			t.Errorf("turnstile %s: exit %d\n%s", args[0], code, out)
		}
	}
	// The server says the same version on /healthz.
	h, err := client.New(startTestServer(t))
	if err != nil {
		t.Fatal(err)
	}
	if health, err := h.Health(ctx); err != nil || health.Version != buildVersion().Version {
		t.Errorf("/healthz: %+v, %v; want version %q", health, err, buildVersion().Version)
	}
	// Without -X main.version, the module's version (go install sets it;
	// a build in the module's own tree says "(devel)" or a pseudo-version).
	if v := buildVersion(); v.Version == "" || v.Version == "dev" {
		t.Errorf("buildVersion in the test binary: %+v", v)
	}
}

// TestJSONAsWritten: an input with <, > and & reads as written, from the
// API, from exec get --json and from watch --json.
func TestJSONAsWritten(t *testing.T) {
	t.Parallel()
	srv := startTestServer(t)
	mustCLI(t, srv, "actions", "create", "--ref", "demo.echo", "--runner", "core.echo")
	const input = `{"expr":"a<b && c>d"}`
	id := strings.TrimSpace(mustCLI(t, srv, "exec", "request", "demo.echo", "--input", input, "--wait"))
	id, _, _ = strings.Cut(id, "\n") // --wait prints the id, then the final state
	for _, args := range [][]string{
		{"exec", "get", id, "--json"},
		{"exec", "get", id},
		{"watch", "executions", "--from", "0", "--count", "1", "--json"},
		{"exec", "events", id, "--json"},
	} {
		out := mustCLI(t, srv, args...)
		if !strings.Contains(out, `a<b && c>d`) || strings.Contains(out, `\u003c`) || strings.Contains(out, `\u0026`) {
			t.Errorf("turnstile %s: the input is not as written:\n%s", strings.Join(args, " "), out)
		}
	}
	req, _ := http.NewRequest("GET", srv+"/api/v1/executions/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"result":{"expr":"a<b && c>d"}`) {
		t.Errorf("GET /api/v1/executions/%s: %s", id, body)
	}
}

// TestRefusedExitCode: a 429 (a full queue) exits 5, as documented.
func TestRefusedExitCode(t *testing.T) {
	t.Parallel()
	srv := startTestServer(t)
	mustCLI(t, srv, "actions", "create", "--ref", "demo.full", "--runner", "core.noop", "--max-queue-length", "1")
	mustCLI(t, srv, "actions", "pause", "demo.full")
	mustCLI(t, srv, "exec", "request", "demo.full")
	// The server refuses early once its read model holds the waiter.
	api, err := client.New(srv, client.WithToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		st, err := api.QueueStats(context.Background(), "demo.full")
		if err == nil && st.QueueLength == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue does not hold the waiter after 30s: %+v, %v", st, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	wantExit(t, srv, exitRefused, `queue.*\(429\)`, "exec", "request", "demo.full")
	a := decode[wire.Action](t, mustCLI(t, srv, "actions", "get", "demo.full", "--json"))
	if !a.Paused || a.MaxQueueLength != 1 {
		t.Errorf("actions get --json: %+v", a)
	}
}

// TestAuditReport: the audit's figures read as sentences, not as a Go map.
func TestAuditReport(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	printAudit(&out, &projections.AuditReport{Events: 40, Executions: 14, Ended: 12, Grants: 13, VoidGrants: 1,
		ByStatus: map[string]int{"running": 2, "failed": 1, "completed": 10, "cancelled": 1},
		Open:     []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}})
	want := "events:      40\n" +
		"executions:  14 (12 ended, 12 open)\n" +
		"grants:      13 (and 1 void: of executions that had already ended)\n" +
		"by status:   2 running, 10 completed, 1 failed, 1 cancelled\n" +
		"open:        a, b, c, d, e, f, g, h, i, j … and 2 more (--json lists them all)\n"
	if out.String() != want {
		t.Errorf("printAudit:\n%s\nwant:\n%s", out.String(), want)
	}
	if regexp.MustCompile(`map\[`).MatchString(out.String()) {
		t.Errorf("printAudit prints a Go map")
	}
}

// TestMakeRunArgs: `make run ARGS=…` hands ARGS to turnstile serve.
func TestMakeRunArgs(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make here")
	}
	out, err := exec.Command("make", "-n", "-C", "../..", "run", "ARGS=--addr 127.0.0.1:9090 --data /tmp/x").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "./bin/turnstile serve --addr 127.0.0.1:9090 --data /tmp/x\n") {
		t.Errorf("make -n run ARGS=…:\n%s", out)
	}
}

// TestCLIDoc: docs/cli.md documents every exit code exactly as turnstile
// --help prints them, and make run ARGS; its command list is the one the
// command table gives (commandList; TURNSTILE_WRITE_CLI_DOC=1 writes it).
func TestCLIDoc(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- commands: from cmd/turnstile's command table, checked by TestCLIDoc -->\n", "<!-- end of commands -->\n"
	i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		t.Fatalf("docs/cli.md has no command list between %q and %q", begin, end)
	}
	if got, want := string(doc[i+len(begin):j]), commandList(); got != want {
		if os.Getenv("TURNSTILE_WRITE_CLI_DOC") == "1" {
			doc = append(append(append([]byte{}, doc[:i+len(begin)]...), want...), doc[j:]...)
			if err := os.WriteFile("../../docs/cli.md", doc, 0o644); err != nil {
				t.Fatal(err)
			}
		} else {
			t.Errorf("docs/cli.md's command list is not the command table's (TURNSTILE_WRITE_CLI_DOC=1 writes it); want:\n%s", want)
		}
	}
	if !strings.Contains(string(doc), "```\n"+exitCodesHelp+"```\n") {
		t.Errorf("docs/cli.md does not hold turnstile --help's exit codes as they are:\n%s", exitCodesHelp)
	}
	for _, want := range []string{`make run ARGS="--addr 127.0.0.1:9090"`, "turnstile --version", "turnstile version --json"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/cli.md does not show %s", want)
		}
	}
}

// commandList is docs/cli.md's command list: every command of the table
// that says what it does, in the table's order.
func commandList() string {
	var b strings.Builder
	b.WriteString("| command | what it does |\n| --- | --- |\n")
	for _, c := range commands {
		if c.what != "" {
			fmt.Fprintf(&b, "| `turnstile %s` | %s |\n", c.name, strings.ReplaceAll(c.what, "|", "\\|"))
		}
	}
	return b.String()
}
