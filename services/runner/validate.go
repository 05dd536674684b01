package runner

import (
	"bytes"
	"errors"
	"fmt"
)

// ErrInvalidInput is wrapped by every error of ValidateInput.
var ErrInvalidInput = errors.New("invalid input")

// Shapes gives, for each built-in runner, the input it expects, as a person
// would write it: the text a refusal shows next to the reason.
var Shapes = map[string]string{
	NameNoop:  `any JSON object (not read)`,
	NameEcho:  `any JSON object`,
	NameSleep: `{"seconds": 0.25} (0 to 86400)`,
	NameFail:  `{"message": "why"} (message optional)`,
	NameShell: `{"args": ["extra", "arguments"]} when the action's runner_config sets input_args, else {}`,
	NameHTTP:  `{"method": "GET", "path": "relative/path?q=1", "headers": {"K": "v"}, "body": …, "fail_on_status": false} ("url" instead of "path" when the runner_config names no url)`,
}

// ValidateInput reports whether input suits the built-in runner name under
// the action's runnerConfig, exactly as a run would decode it: an error here
// is the "invalid input" failure a run would end with, so a caller can
// refuse the request before anything is written. The error wraps
// ErrInvalidInput and says the shape the runner expects. The input of a
// runner that is not built in is that runner's to read, and a runnerConfig
// that does not decode is left for the run to report: ValidateInput accepts
// both.
func ValidateInput(name string, runnerConfig, input []byte) error {
	var err error
	switch name {
	case NameNoop:
		return nil
	case NameEcho:
		_, err = decodeEcho(input)
	case NameSleep:
		_, err = decodeSleep(input)
	case NameFail:
		_, err = decodeFail(input)
	case NameShell:
		if t := bytes.TrimSpace(runnerConfig); len(t) == 0 || string(t) == "null" {
			return nil // every run fails, saying the program belongs to the definition
		}
		c, cerr := decodeShellConfig(runnerConfig)
		if cerr != nil {
			return nil
		}
		_, err = decodeShellInput(c, input)
	case NameHTTP:
		c := httpConfig{}
		if t := bytes.TrimSpace(runnerConfig); len(t) != 0 && string(t) != "null" {
			var cerr error
			if c, cerr = decodeHTTPConfig(runnerConfig); cerr != nil {
				return nil
			}
		}
		_, err = decodeHTTPWith(c, input)
	default:
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w for %s: %v; %s expects %s", ErrInvalidInput, name, err, name, Shapes[name])
	}
	return nil
}
