package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
)

// Names of the built-in runners, as actions refer to them.
const (
	NameNoop  = "core.noop"
	NameEcho  = "core.echo"
	NameSleep = "core.sleep"
	NameFail  = "core.fail"
	NameShell = "core.shell"
	NameHTTP  = "core.http"
)

// Runner runs one attempt of an action.
//
// Run is called with the execution's input and returns its result. ctx carries
// the action's timeout (as its deadline) and cancellation: when ctx is cancelled
// or its deadline passes, Run returns promptly with an error that wraps
// ctx.Err(), so errors.Is(err, context.DeadlineExceeded) tells a timeout and
// errors.Is(err, context.Canceled) a cancellation. A failure of the action
// itself is returned as a *Failure, which never wraps a context error. On success
// the result is valid JSON and the error is nil.
//
// Implementations must be safe for concurrent use: one Runner serves every
// execution of every action that names it.
type Runner interface {
	Run(ctx context.Context, input json.RawMessage) (json.RawMessage, error)
}

// Configured is a Runner that reads the runner_config of the action it runs
// for. The config is the action definition's, handed over with every run
// next to the input: a request's input never chooses it. RunConfigured
// keeps Run's promises; config is nil when the action defines none, and
// Run(ctx, input) means RunConfigured(ctx, nil, input).
type Configured interface {
	Runner
	RunConfigured(ctx context.Context, config, input json.RawMessage) (json.RawMessage, error)
}

// RunWith runs r for one attempt with the action's runner_config next to
// the input: a Configured runner gets config, any other runner the input
// alone.
func RunWith(ctx context.Context, r Runner, config, input json.RawMessage) (json.RawMessage, error) {
	if c, ok := r.(Configured); ok {
		return c.RunConfigured(ctx, config, input)
	}
	return r.Run(ctx, input)
}

// ValidateConfig reports whether config (an action's runner_config; nil
// for none) suits the built-in runner name: core.shell's and core.http's
// are checked as the package doc describes, and the other built-ins take
// none. The config of a runner that is not built in is that runner's to
// read: ValidateConfig accepts it.
func ValidateConfig(name string, config json.RawMessage) error {
	none := len(bytes.TrimSpace(config)) == 0 || string(bytes.TrimSpace(config)) == "null"
	switch name {
	case NameShell:
		if none {
			return nil // allowed to define; every run fails, saying why
		}
		_, err := decodeShellConfig(config)
		return err
	case NameHTTP:
		if none {
			return nil
		}
		_, err := decodeHTTPConfig(config)
		return err
	case NameNoop, NameEcho, NameSleep, NameFail:
		if !none {
			return fmt.Errorf("%s takes no runner_config", name)
		}
	}
	return nil
}

// instant marks the built-in runners that return at once, waiting on
// nothing (core.noop, core.echo, core.fail).
type instant interface{ instant() }

// IsInstant reports whether r returns at once, waiting on nothing: no
// timeout can pass while it runs, so a worker may run it without a deadline
// of its own (a timer per run saved). Cancellation still reaches it.
func IsInstant(r Runner) bool {
	_, ok := r.(instant)
	return ok
}

// Func adapts an ordinary function to the Runner interface.
type Func func(ctx context.Context, input json.RawMessage) (json.RawMessage, error)

// Run calls f(ctx, input).
func (f Func) Run(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
	return f(ctx, input)
}

// Failure is the error a Runner returns when the action itself failed: core.fail,
// a non-zero exit of core.shell, invalid input, a command or URL that cannot be
// reached. It is never returned for a cancelled or timed-out ctx.
//
// Message is a human-readable reason, suitable as the execution's error.
// Result, when not nil, is valid JSON to record with the failure (core.shell
// puts its exit_code, stdout and stderr there). Err, when not nil, is the
// underlying cause, reachable through errors.Unwrap.
type Failure struct {
	Message string
	Result  json.RawMessage
	Err     error
}

// Error returns Message, or Err's text when Message is empty (or "action
// failed" when both are).
func (f *Failure) Error() string {
	switch {
	case f.Message != "":
		return f.Message
	case f.Err != nil:
		return f.Err.Error()
	default:
		return "action failed"
	}
}

// Unwrap returns the underlying cause, if any.
func (f *Failure) Unwrap() error { return f.Err }

// failf returns a *Failure whose message is formatted from format and args. A
// %w verb in format makes the wrapped error the Failure's Err.
func failf(result json.RawMessage, format string, args ...any) *Failure {
	err := fmt.Errorf(format, args...)
	return &Failure{Message: err.Error(), Result: result, Err: errors.Unwrap(err)}
}

// invalidInput returns the Failure for input that does not decode or validate.
// Its message starts with "invalid input: ".
func invalidInput(err error) *Failure {
	return &Failure{Message: "invalid input: " + err.Error(), Err: err}
}

// Interrupted is the error a Runner may return when ctx ended before the action
// did and a partial result is worth keeping (core.shell returns the output
// captured so far and how the process ended). Err wraps ctx.Err(), so
// errors.Is(err, context.Canceled) and errors.Is(err, context.DeadlineExceeded)
// see through an *Interrupted; it is never a *Failure.
type Interrupted struct {
	Err    error           // wraps the context's error
	Result json.RawMessage // valid JSON, or nil
}

// Error returns Err's text.
func (e *Interrupted) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *Interrupted) Unwrap() error { return e.Err }

// ctxError returns the error for a run of runner name that ended because ctx
// did. It wraps ctx.Err() (or context.Canceled if ctx is somehow not done).
func ctxError(ctx context.Context, name string) error {
	err := ctx.Err()
	if err == nil {
		err = context.Canceled
	}
	return fmt.Errorf("%s: %w", name, err)
}

// ErrDuplicateRunner is wrapped by the error Register returns for a name that is
// already registered.
var ErrDuplicateRunner = errors.New("runner already registered")

// Registry maps runner names to Runners. The zero value is not usable; create
// one with NewRegistry or Builtins. A Registry is safe for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	runners map[string]Runner
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{runners: make(map[string]Runner)}
}

// Register adds r under name. It returns an error, and changes nothing, when
// name is empty, r is nil, or name is already registered (that error wraps
// ErrDuplicateRunner).
func (reg *Registry) Register(name string, r Runner) error {
	if name == "" {
		return errors.New("runner: register: empty name")
	}
	if r == nil {
		return fmt.Errorf("runner: register %q: nil runner", name)
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if _, ok := reg.runners[name]; ok {
		return fmt.Errorf("runner: register %q: %w", name, ErrDuplicateRunner)
	}
	reg.runners[name] = r
	return nil
}

// Lookup returns the Runner registered under name, and whether there is one.
func (reg *Registry) Lookup(name string) (Runner, bool) {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	r, ok := reg.runners[name]
	return r, ok
}

// Names returns the registered names, sorted. The slice is the caller's.
func (reg *Registry) Names() []string {
	reg.mu.RLock()
	names := make([]string, 0, len(reg.runners))
	for n := range reg.runners {
		names = append(names, n)
	}
	reg.mu.RUnlock()
	sort.Strings(names)
	return names
}
