package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// MaxSleep is the longest core.sleep accepts.
const MaxSleep = 24 * time.Hour

// noopRunner is core.noop: any input (not even looked at), result {}.
type noopRunner struct{}

func (noopRunner) instant() {}

func (noopRunner) Run(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
	if ctx.Err() != nil {
		return nil, ctxError(ctx, NameNoop)
	}
	return json.RawMessage(`{}`), nil
}

// echoRunner is core.echo: a JSON object in, the same object out.
type echoRunner struct{}

func (echoRunner) instant() {}

func (echoRunner) Run(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
	if ctx.Err() != nil {
		return nil, ctxError(ctx, NameEcho)
	}
	obj, err := decodeEcho(input)
	if err != nil {
		return nil, invalidInput(err)
	}
	return obj, nil
}

// decodeEcho returns a copy of input, trimmed of surrounding white space, if
// input is one JSON object.
func decodeEcho(input []byte) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(input)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return nil, errors.New(`no input: core.echo returns its input, a JSON object (request it with "input": {…})`)
	}
	if !json.Valid(trimmed) {
		return nil, errors.New("not valid JSON")
	}
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, errors.New("want a JSON object")
	}
	return bytes.Clone(trimmed), nil
}

// sleepRunner is core.sleep: {"seconds": s} waits s seconds (or until ctx ends)
// and returns {"slept_seconds": s}.
type sleepRunner struct{}

type sleepInput struct {
	Seconds *float64 `json:"seconds"`
}

// decodeSleep decodes and validates core.sleep's input: "seconds" is required,
// finite, >= 0 and at most MaxSleep.
func decodeSleep(input []byte) (float64, error) {
	var in sleepInput
	if err := decodeStrict(input, &in, "seconds"); err != nil {
		return 0, err
	}
	if in.Seconds == nil {
		return 0, errors.New(`"seconds" is required`)
	}
	s := *in.Seconds
	if math.IsNaN(s) || math.IsInf(s, 0) || s < 0 || s > MaxSleep.Seconds() {
		return 0, fmt.Errorf(`"seconds" must be between 0 and %g, got %g`, MaxSleep.Seconds(), s)
	}
	return s, nil
}

func (sleepRunner) Run(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
	if ctx.Err() != nil {
		return nil, ctxError(ctx, NameSleep)
	}
	s, err := decodeSleep(input)
	if err != nil {
		return nil, invalidInput(err)
	}
	if d := time.Duration(s * float64(time.Second)); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctxError(ctx, NameSleep)
		}
	}
	return json.Marshal(struct {
		SleptSeconds float64 `json:"slept_seconds"`
	}{s})
}

// failRunner is core.fail: {"message": m} fails with message m.
type failRunner struct{}

func (failRunner) instant() {}

type failInput struct {
	Message string `json:"message"`
}

// defaultFailMessage is core.fail's message when the input gives none.
const defaultFailMessage = "failed by core.fail"

// decodeFail decodes core.fail's input and returns its message; a missing or
// empty message gives defaultFailMessage.
func decodeFail(input []byte) (string, error) {
	var in failInput
	if err := decodeStrict(input, &in, "message"); err != nil {
		return "", err
	}
	if in.Message == "" {
		return defaultFailMessage, nil
	}
	return in.Message, nil
}

func (failRunner) Run(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
	if ctx.Err() != nil {
		return nil, ctxError(ctx, NameFail)
	}
	msg, err := decodeFail(input)
	if err != nil {
		return nil, invalidInput(err)
	}
	return nil, &Failure{Message: msg}
}
