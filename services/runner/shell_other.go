//go:build !linux

package runner

import (
	"context"
	"encoding/json"
	"runtime"
)

// Run fails: core.shell's process-group handling is implemented for Linux only.
func (r *shellRunner) Run(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
	if ctx.Err() != nil {
		return nil, ctxError(ctx, NameShell)
	}
	if _, err := decodeShell(input); err != nil {
		return nil, invalidInput(err)
	}
	return nil, failf(nil, "core.shell: not supported on %s", runtime.GOOS)
}
