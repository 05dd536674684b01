package runner_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/services/runner"
)

// TestValidateInput: what a run would refuse as invalid input is refused
// here, with the shape the runner expects; what it would take passes.
func TestValidateInput(t *testing.T) {
	shell := `{"command":"/bin/echo","input_args":true}`
	for _, tc := range []struct {
		runner, config, input string
		ok                    bool
	}{
		{"core.noop", "", `not even JSON`, true},
		{"core.echo", "", `{"a":1}`, true},
		{"core.echo", "", `[1]`, false},
		{"core.sleep", "", `{"seconds":0.5}`, true},
		{"core.sleep", "", `{"seconds":"five"}`, false},
		{"core.sleep", "", `{"seconds":-1}`, false},
		{"core.sleep", "", `{}`, false},
		{"core.fail", "", `{}`, true},
		{"core.fail", "", `{"msg":"x"}`, false},
		{"core.shell", shell, `{"args":["hi"]}`, true},
		{"core.shell", shell, `{"command":"echo hello; date"}`, false},
		{"core.shell", `{"command":"/bin/date"}`, `{"args":["x"]}`, false},
		{"core.shell", "", `{"command":"anything"}`, true}, // no config: the run says why
		{"core.http", `{"url":"https://example.com/v1/"}`, `{"path":"users/1"}`, true},
		{"core.http", `{"url":"https://example.com/v1/"}`, `{"url":"https://evil.example/"}`, false},
		{"core.http", "", `{"url":"https://example.com/"}`, true},
		{"core.http", "", `{"method":"BREW","url":"https://example.com/"}`, false},
		{"user.custom", "", `{"anything":true}`, true},
	} {
		err := runner.ValidateInput(tc.runner, []byte(tc.config), []byte(tc.input))
		if (err == nil) != tc.ok {
			t.Errorf("%s %s %s: %v, want ok=%v", tc.runner, tc.config, tc.input, err, tc.ok)
		}
		if err != nil && (!errors.Is(err, runner.ErrInvalidInput) || !strings.Contains(err.Error(), tc.runner+" expects "+runner.Shapes[tc.runner])) {
			t.Errorf("%s: %v, want ErrInvalidInput naming the expected shape", tc.runner, err)
		}
	}
}
