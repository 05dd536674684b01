package runner

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// mustRunner returns the runner named name from Builtins(cfg). A cfg that
// enables nothing explicitly enables every built-in, and core.shell may run
// as the test's own user even when that is root (the tests of ShellUser
// and of the refusal set the fields themselves).
func mustRunner(t *testing.T, cfg Config, name string) Runner {
	t.Helper()
	if cfg.Enabled == nil {
		cfg.Enabled = AllBuiltins
	}
	if cfg.ShellUser == "" {
		cfg.ShellAllowRoot = true
	}
	r, ok := Builtins(cfg).Lookup(name)
	if !ok {
		t.Fatalf("Builtins has no %s", name)
	}
	return r
}

// asFailure returns err as a *Failure, failing the test if it is not one or if
// it also looks like a context error.
func asFailure(t *testing.T, err error) *Failure {
	t.Helper()
	var f *Failure
	if !errors.As(err, &f) {
		t.Fatalf("error %v (%T) is not a *Failure", err, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("failure %v wraps a context error", err)
	}
	return f
}

// checkCtxErr fails the test unless err wraps want and is not a *Failure.
func checkCtxErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error %v (%T), want one wrapping %v", err, err, want)
	}
	var f *Failure
	if errors.As(err, &f) {
		t.Fatalf("context error %v is also a *Failure", err)
	}
}

// decodeJSON unmarshals raw into a map, failing the test on error.
func decodeJSON(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("result %s is not a JSON object: %v", raw, err)
	}
	return m
}

// withConfig returns r run with config as its action's runner_config: the
// argument of Run is then the request's input.
func withConfig(r Runner, config string) Runner {
	return Func(func(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
		return RunWith(ctx, r, json.RawMessage(config), input)
	})
}

// programRunner returns r run with the argument of Run as its action's
// runner_config and no input: the shell tables describe programs as an
// action's definition now does.
func programRunner(r Runner) Runner {
	return Func(func(ctx context.Context, config json.RawMessage) (json.RawMessage, error) {
		return RunWith(ctx, r, config, nil)
	})
}

// mustShell returns core.shell from Builtins(cfg) (see mustRunner), run by
// programRunner.
func mustShell(t *testing.T, cfg Config) Runner {
	t.Helper()
	return programRunner(mustRunner(t, cfg, NameShell))
}
