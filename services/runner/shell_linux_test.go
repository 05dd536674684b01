//go:build linux

package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/internal/waitfor"
)

// shellInputJSON builds a core.shell runner_config (once the input, whence
// the name); mustShell's runner takes it as the action's.
func shellInputJSON(t *testing.T, command string, args []string, env map[string]string, dir string) json.RawMessage {
	t.Helper()
	in := map[string]any{"command": command}
	if args != nil {
		in["args"] = args
	}
	if env != nil {
		in["env"] = env
	}
	if dir != "" {
		in["dir"] = dir
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeShellResult(t *testing.T, raw json.RawMessage) shellResult {
	t.Helper()
	var res shellResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
	return res
}

func mustLookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := lookPath(name, DefaultShellPath)
	if err != nil {
		t.Skipf("%s not available: %v", name, err)
	}
	return p
}

func TestShellSuccess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cfg     Config
		command string
		args    []string
		env     map[string]string
		dir     string
		want    shellResult
	}{
		{name: "echo absolute", command: "/bin/echo", args: []string{"hi", "there"},
			want: shellResult{Stdout: "hi there\n"}},
		{name: "echo bare name", command: "echo", args: []string{"hi"},
			want: shellResult{Stdout: "hi\n"}},
		{name: "no interpolation", command: "/bin/echo", args: []string{"$HOME", "*", "`id`", "a;b"},
			want: shellResult{Stdout: "$HOME * `id` a;b\n"}},
		{name: "stderr", command: "/bin/sh", args: []string{"-c", "echo out; echo err >&2"},
			want: shellResult{Stdout: "out\n", Stderr: "err\n"}},
		{name: "env extends the minimal base", command: "env", env: map[string]string{"FOO": "bar baz"},
			want: shellResult{Stdout: "FOO=bar baz\nPATH=" + DefaultShellPath + "\n"}},
		{name: "env overrides the base", cfg: Config{ShellEnv: map[string]string{"PATH": DefaultShellPath, "BASE": "1", "KEEP": "k"}},
			command: "env", env: map[string]string{"BASE": "2"},
			want: shellResult{Stdout: "BASE=2\nKEEP=k\nPATH=" + DefaultShellPath + "\n"}},
		{name: "dir", command: "/bin/pwd", dir: dir, want: shellResult{Stdout: realDir + "\n"}},
		{name: "stdout truncated", cfg: Config{MaxOutputBytes: 10}, command: "/bin/sh", args: []string{"-c", "printf 0123456789abcdef; printf 0123 >&2"},
			want: shellResult{Stdout: "0123456789", StdoutTruncated: true, Stderr: "0123"}},
		{name: "large output bounded", cfg: Config{MaxOutputBytes: 16}, command: "/bin/sh", args: []string{"-c", "head -c 4000000 /dev/zero | tr '\\0' x; echo done >&2"},
			want: shellResult{Stdout: strings.Repeat("x", 16), StdoutTruncated: true, Stderr: "done\n"}},
		{name: "truncation keeps whole runes", cfg: Config{MaxOutputBytes: 10}, command: "/usr/bin/printf", args: []string{"aaaaaaaaaé"},
			want: shellResult{Stdout: "aaaaaaaaa", StdoutTruncated: true}},
		{name: "allowed command", cfg: Config{ShellAllowedCommands: []string{mustLookPath(t, "echo")}}, command: "echo", args: []string{"ok"},
			want: shellResult{Stdout: "ok\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := mustShell(t, tt.cfg)
			out, err := r.Run(context.Background(), shellInputJSON(t, tt.command, tt.args, tt.env, tt.dir))
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := decodeShellResult(t, out); got != tt.want {
				t.Fatalf("result %+v, want %+v", got, tt.want)
			}
			m := decodeJSON(t, out)
			for _, k := range []string{"exit_code", "stdout", "stderr"} {
				if _, ok := m[k]; !ok {
					t.Fatalf("result %s lacks %q", out, k)
				}
			}
		})
	}
}

func TestShellFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		cfg        Config
		input      json.RawMessage
		wantMsg    string
		wantResult *shellResult // nil: the failure carries no result
	}{
		{name: "non-zero exit", input: shellInputJSON(t, "/bin/sh", []string{"-c", "echo out; echo err >&2; exit 3"}, nil, ""),
			wantMsg: "exited with status 3", wantResult: &shellResult{ExitCode: 3, Stdout: "out\n", Stderr: "err\n"}},
		{name: "false", input: shellInputJSON(t, "false", nil, nil, ""),
			wantMsg: "exited with status 1", wantResult: &shellResult{ExitCode: 1}},
		{name: "killed by its own signal", input: shellInputJSON(t, "/bin/sh", []string{"-c", "kill -TERM $$"}, nil, ""),
			wantMsg: "killed by signal SIGTERM", wantResult: &shellResult{ExitCode: -1, Signal: "SIGTERM"}},
		{name: "bare name not found", input: shellInputJSON(t, "no-such-command-turnstile", nil, nil, ""),
			wantMsg: "not found"},
		{name: "not found with config PATH", input: shellInputJSON(t, "echo", nil, map[string]string{"PATH": "/nonexistent"}, ""),
			wantMsg: "not found"},
		{name: "absolute not found", input: shellInputJSON(t, "/no/such/program", nil, nil, ""),
			wantMsg: "cannot start"},
		{name: "not executable", input: shellInputJSON(t, "/etc/passwd", nil, nil, ""),
			wantMsg: "cannot start"},
		{name: "missing dir", input: shellInputJSON(t, "/bin/echo", nil, nil, "/no/such/dir"),
			wantMsg: "cannot start"},
		{name: "not allowed", cfg: Config{ShellAllowedCommands: []string{"/nonexistent/echo"}}, input: shellInputJSON(t, "/bin/echo", nil, nil, ""),
			wantMsg: "not in the allowed commands"},
		{name: "relative command", input: shellInputJSON(t, "./echo", nil, nil, ""), wantMsg: "invalid runner_config"},
		{name: "no command", input: json.RawMessage(`{"args":["x"]}`), wantMsg: `invalid runner_config: core.shell runner_config: "command" is required`},
		{name: "unknown field", input: json.RawMessage(`{"command":"/bin/echo","shell":true}`), wantMsg: `invalid runner_config: core.shell runner_config: unknown field "shell"`},
		{name: "args not array", input: json.RawMessage(`{"command":"/bin/echo","args":"hi"}`), wantMsg: "invalid runner_config"},
		{name: "bad env name", input: shellInputJSON(t, "/bin/echo", nil, map[string]string{"A=B": "1"}, ""), wantMsg: "invalid runner_config"},
		{name: "empty PATH", input: shellInputJSON(t, "/bin/echo", nil, map[string]string{"PATH": ""}, ""), wantMsg: "invalid runner_config"},
		{name: "relative dir", input: shellInputJSON(t, "/bin/echo", nil, nil, "tmp"), wantMsg: "invalid runner_config"},
		{name: "NUL in arg", input: shellInputJSON(t, "/bin/echo", []string{"a\x00b"}, nil, ""), wantMsg: "invalid runner_config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := mustShell(t, tt.cfg).Run(context.Background(), tt.input)
			if out != nil {
				t.Fatalf("result %s alongside an error", out)
			}
			f := asFailure(t, err)
			if !strings.Contains(f.Message, tt.wantMsg) {
				t.Fatalf("failure %q, want it to contain %q", f.Message, tt.wantMsg)
			}
			if tt.wantResult == nil {
				if f.Result != nil {
					t.Fatalf("failure carries result %s", f.Result)
				}
				return
			}
			if got := decodeShellResult(t, f.Result); got != *tt.wantResult {
				t.Fatalf("failure result %+v, want %+v", got, *tt.wantResult)
			}
		})
	}
}

// runShellUntilStarted runs input (which must write "$$ [more pids]" to the
// file named by its last argument) and, once the file holds the pids, calls
// stop. It returns Run's result, the pids, the time from stop to return,
// and Run's error.
func runShellUntilStarted(t *testing.T, r Runner, ctx context.Context, stop func(), script, pidFile string) (json.RawMessage, []int, time.Duration, error) {
	t.Helper()
	type ret struct {
		out json.RawMessage
		err error
	}
	done := make(chan ret, 1)
	go func() {
		out, err := r.Run(ctx, shellInputJSON(t, "/bin/sh", []string{"-c", script, "sh", pidFile}, nil, ""))
		done <- ret{out, err}
	}()
	var pids []int
	deadline := time.Now().Add(10 * time.Second)
	for pids == nil {
		if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
			for _, f := range strings.Fields(string(b)) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("pid file %q: %v", b, err)
				}
				pids = append(pids, pid)
			}
			break
		}
		select {
		case r := <-done:
			t.Fatalf("command ended before writing its pids: %s, %v", r.out, r.err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("command did not start")
		}
	}
	start := time.Now()
	stop()
	select {
	case r := <-done:
		return r.out, pids, time.Since(start), r.err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return 30s after the stop")
		return nil, nil, 0, nil
	}
}

// processGone reports whether pid is no longer a running process: it does
// not exist, or it is a zombie that is not ours to reap (its parent is not us).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ppid ...; comm may contain spaces and parentheses.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return false
	}
	ppid, _ := strconv.Atoi(fields[1])
	return fields[0] == "Z" && ppid != os.Getpid()
}

// waitGone waits until every pid is gone.
func waitGone(t *testing.T, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		waitfor.That(t, fmt.Sprintf("process %d to be gone", pid), func() bool { return processGone(pid) })
	}
}

func interruptedResult(t *testing.T, err error) shellResult {
	t.Helper()
	var in *Interrupted
	if !errors.As(err, &in) {
		t.Fatalf("error %v (%T) is not an *Interrupted", err, err)
	}
	return decodeShellResult(t, in.Result)
}

func TestShellCancelSIGINT(t *testing.T) {
	t.Parallel()
	r := mustShell(t, Config{ShellKillGrace: 20 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pidFile := filepath.Join(t.TempDir(), "pids")
	// The shell execs sleep, which dies of the SIGINT: no need for the grace.
	out, pids, took, err := runShellUntilStarted(t, r, ctx, cancel, `echo partial; echo $$ > "$1"; exec sleep 30`, pidFile)
	if out != nil {
		t.Fatalf("result %s from a cancelled run", out)
	}
	checkCtxErr(t, err, context.Canceled)
	if took > 10*time.Second {
		t.Fatalf("returned %s after the cancel; SIGINT alone should end sleep", took)
	}
	res := interruptedResult(t, err)
	if res.Signal != "SIGINT" || res.ExitCode != -1 || res.Stdout != "partial\n" {
		t.Fatalf("partial result %+v, want SIGINT, exit -1, stdout kept", res)
	}
	waitGone(t, pids...)
}

func TestShellCancelEscalatesToSIGKILL(t *testing.T) {
	t.Parallel()
	const grace = 300 * time.Millisecond
	r := mustShell(t, Config{ShellKillGrace: grace})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pidFile := filepath.Join(t.TempDir(), "pids")
	// Both the shell and its child ignore SIGINT; only SIGKILL ends them.
	script := `trap "" INT; sleep 30 & echo $$ $! > "$1"; wait`
	_, pids, took, err := runShellUntilStarted(t, r, ctx, cancel, script, pidFile)
	checkCtxErr(t, err, context.Canceled)
	if took < grace {
		t.Fatalf("returned %s after the cancel, before the %s grace: SIGINT was not ignored?", took, grace)
	}
	if took > 10*time.Second {
		t.Fatalf("returned %s after the cancel", took)
	}
	if res := interruptedResult(t, err); res.Signal != "SIGKILL" {
		t.Fatalf("partial result %+v, want signal SIGKILL", res)
	}
	if !strings.Contains(err.Error(), "SIGKILL") {
		t.Fatalf("error %q does not mention SIGKILL", err)
	}
	if len(pids) != 2 {
		t.Fatalf("pids %v", pids)
	}
	// The shell was our child: it must be reaped, not a zombie.
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pids[0])); err == nil && !processGone(pids[0]) {
		t.Fatalf("shell %d still exists", pids[0])
	}
	waitGone(t, pids...)
}

func TestShellTimeout(t *testing.T) {
	t.Parallel()
	r := mustShell(t, Config{ShellKillGrace: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	out, err := r.Run(ctx, shellInputJSON(t, "sleep", []string{"30"}, nil, ""))
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("timed-out run returned after %s", d)
	}
	if out != nil {
		t.Fatalf("result %s from a timed-out run", out)
	}
	checkCtxErr(t, err, context.DeadlineExceeded)
	if errors.Is(err, context.Canceled) {
		t.Fatal("timeout reported as cancellation")
	}
}

// A background process left in the group does not keep Run waiting (it holds
// the stdout pipe) and does not outlive the run.
func TestShellKillsLeftovers(t *testing.T) {
	t.Parallel()
	start := time.Now()
	out, err := mustShell(t, Config{}).Run(context.Background(),
		shellInputJSON(t, "/bin/sh", []string{"-c", "sleep 30 & echo $!"}, nil, ""))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Run took %s: it waited for the background process", d)
	}
	res := decodeShellResult(t, out)
	pid, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	waitGone(t, pid)
}

func TestShellDisabled(t *testing.T) {
	t.Parallel()
	if _, ok := Builtins(Config{Enabled: AllBuiltins, DisableShell: true, ShellAllowRoot: true}).Lookup(NameShell); ok {
		t.Fatal("core.shell registered although disabled")
	}
}

func TestShellConcurrentRuns(t *testing.T) {
	t.Parallel()
	r := mustShell(t, Config{})
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			out, err := r.Run(context.Background(), shellInputJSON(t, "/bin/echo", []string{strconv.Itoa(i)}, nil, ""))
			if err == nil && decodeShellResult(t, out).Stdout != strconv.Itoa(i)+"\n" {
				err = fmt.Errorf("run %d: result %s", i, out)
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestLookPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		want       string // "" means not found
	}{
		{"tool", "/nonexistent:" + dir, exe},
		{"plain", dir, ""},
		{"sub", dir, ""},
		{"tool", "relative/dir", ""},
		{"tool", "", ""},
	}
	for _, tt := range tests {
		got, err := lookPath(tt.name, tt.path)
		if got != tt.want || (err == nil) != (tt.want != "") {
			t.Errorf("lookPath(%q, %q) = %q, %v; want %q", tt.name, tt.path, got, err, tt.want)
		}
	}
}
