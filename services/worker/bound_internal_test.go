package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/runner"
)

// TestBound: what a run returned is kept within MaxResultBytes: a result
// over it turns the run into a failure that says so; a failure's or an
// interruption's result over it is left out, the failure's message saying
// so and the interruption's cause kept; what fits passes unchanged.
func TestBound(t *testing.T) {
	w := &Worker{cfg: Config{MaxResultBytes: 10}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	fits, over := json.RawMessage(`{"a":"12"}`), json.RawMessage(`{"a":"123"}`)

	if res, err := w.bound("x", fits, nil); err != nil || string(res) != string(fits) {
		t.Errorf("a result that fits: %s, %v", res, err)
	}
	res, err := w.bound("x", over, nil)
	var f *runner.Failure
	if res != nil || !errors.As(err, &f) || !errors.Is(err, domain.ErrResultTooLarge) || !strings.Contains(f.Message, "11 bytes, the limit is 10") {
		t.Errorf("a result over the bound: %s, %v", res, err)
	}

	res, err = w.bound("x", nil, &runner.Failure{Message: "boom", Result: over})
	if res != nil || !errors.As(err, &f) || f.Result != nil || !strings.Contains(f.Message, "boom") || !strings.Contains(f.Message, "left out") {
		t.Errorf("a failure with a result over the bound: %v (%+v)", err, f)
	}
	keep := &runner.Failure{Message: "boom", Result: fits}
	if _, err := w.bound("x", nil, keep); err != error(keep) {
		t.Errorf("a failure whose result fits: %v", err)
	}

	cause := context.DeadlineExceeded
	_, err = w.bound("x", nil, &runner.Interrupted{Err: cause, Result: over})
	var intr *runner.Interrupted
	if errors.As(err, &intr) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an interruption with a result over the bound: %v", err)
	}
	small := &runner.Interrupted{Err: cause, Result: fits}
	if _, err := w.bound("x", nil, small); err != error(small) {
		t.Errorf("an interruption whose result fits: %v", err)
	}
}
