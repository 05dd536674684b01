//go:build !linux

package runner

import (
	"context"
	"encoding/json"
	"runtime"
)

// Run fails: with no runner_config there is no program to run.
func (r *shellRunner) Run(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
	return r.RunConfigured(ctx, nil, input)
}

// RunConfigured fails: core.shell's process-group handling is implemented
// for Linux only.
func (r *shellRunner) RunConfigured(ctx context.Context, config, input json.RawMessage) (json.RawMessage, error) {
	if ctx.Err() != nil {
		return nil, ctxError(ctx, NameShell)
	}
	if _, f := plan(config, input); f != nil {
		return nil, f
	}
	return nil, failf(nil, "core.shell: not supported on %s", runtime.GOOS)
}
