package executor_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/runner"
)

// seenRunner is a runner that reads its action's runner_config and records
// what each run got.
type seenRunner struct {
	mu   sync.Mutex
	runs []string // "config|input"
}

func (r *seenRunner) Run(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
	return r.RunConfigured(ctx, nil, input)
}

func (r *seenRunner) RunConfigured(_ context.Context, config, input json.RawMessage) (json.RawMessage, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, string(config)+"|"+string(input))
	return json.RawMessage(`{}`), nil
}

// TestRunnerConfigReachesTheRunner: the runner_config of the policy in
// force at the grant travels in the handoff to the runner, next to the
// input; a policy change applies from the next grant on.
func TestRunnerConfigReachesTheRunner(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	seen := &seenRunner{}
	h.addWorker("w1", 4, time.Hour, map[string]runner.Runner{"custom.seen": seen})
	h.define(domain.Policy{Ref: "rc.seen", Runner: "custom.seen", RunnerConfig: json.RawMessage(`{"b": 1, "a": [true]}`)})
	first := h.request("rc.seen", `{"n":1}`)
	h.waitStatus(first, domain.StatusCompleted)
	if _, err := h.cmds.ChangePolicy(context.Background(), domain.Policy{Ref: "rc.seen", Runner: "custom.seen",
		RunnerConfig: json.RawMessage(`{"second":"config"}`)}); err != nil {
		t.Fatal(err)
	}
	second := h.request("rc.seen", `{"n":2}`)
	h.waitStatus(second, domain.StatusCompleted)

	seen.mu.Lock()
	got := strings.Join(seen.runs, "\n")
	seen.mu.Unlock()
	if want := `{"a":[true],"b":1}|{"n":1}` + "\n" + `{"second":"config"}|{"n":2}`; got != want {
		t.Fatalf("the runner got\n%s\nwant\n%s", got, want)
	}
	var sched domain.ExecutionScheduled
	for _, r := range h.stream(domain.ExecutionStream(first)) {
		if s, ok := r.ev.(domain.ExecutionScheduled); ok {
			sched = s
		}
	}
	if string(sched.RunnerConfig) != `{"a":[true],"b":1}` {
		t.Fatalf("execution.scheduled carries runner_config %s", sched.RunnerConfig)
	}
	h.auditClean()
}

// TestShellThroughTheExecutor: a client's input runs the program the
// definition names, with the arguments it may add, and cannot name another.
func TestShellThroughTheExecutor(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("core.shell runs on linux")
	}
	h := newHarness(t, harnessConfig{})
	h.addWorker("w1", 4, time.Hour, nil)
	h.define(domain.Policy{Ref: "rc.echo", Runner: runner.NameShell,
		RunnerConfig: json.RawMessage(`{"command":"/bin/echo","args":["fixed"],"input_args":true}`)})
	ok := h.request("rc.echo", `{"args":["$(id)"]}`)
	if x := h.waitStatus(ok, domain.StatusCompleted).State(); !strings.Contains(string(x.Result), `"stdout":"fixed $(id)\n"`) {
		t.Fatalf("result %s", x.Result)
	}
	evil := h.request("rc.echo", `{"command":"/bin/sh","args":["-c","id"]}`)
	if x := h.waitStatus(evil, domain.StatusFailed).State(); !strings.Contains(x.Error, `invalid input: "command": the program is fixed`) || x.Result != nil {
		t.Fatalf("input naming a command: error %q, result %s", x.Error, x.Result)
	}
	h.define(domain.Policy{Ref: "rc.none", Runner: runner.NameShell})
	none := h.request("rc.none", `{"command":"/bin/sh","args":["-c","id"]}`)
	if x := h.waitStatus(none, domain.StatusFailed).State(); !strings.Contains(x.Error, "defines no runner_config") {
		t.Fatalf("no runner_config: error %q", x.Error)
	}
	h.auditClean()
}
