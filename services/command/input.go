// A request's input checked against its action's built-in runner before
// anything is written, so a shape the runner would refuse at run time is a
// 400 now rather than a failed execution later.
package command

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/runner"
)

// checkInput refuses, with ErrInvalidRequest, a request whose input (or,
// for a with_items parent, any child's input) the action's built-in runner
// would refuse at run time (runner.ValidateInput): the error says the
// shape the runner expects. Runners that are not built in (not core.*)
// read their own input and are not checked. The top-level field the
// policy's concurrency_key names is the action's, not the runner's, and is
// left out of the check.
func (c *Service) checkInput(ctx context.Context, r Request) error {
	p, ok := c.policyOf(ctx, r.Action)
	if !ok || !strings.HasPrefix(p.Runner, "core.") {
		return nil
	}
	check := func(input json.RawMessage) error {
		if err := runner.ValidateInput(p.Runner, p.RunnerConfig, withoutField(input, p.ConcurrencyKey)); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
		}
		return nil
	}
	if r.WithItems == nil {
		return check(r.Input)
	}
	for i, item := range r.WithItems {
		in, err := domain.ChildInput(r.Input, item)
		if err != nil {
			return err
		}
		if err := check(in); err != nil {
			return fmt.Errorf("with_items[%d]: %w", i, err)
		}
	}
	return nil
}

// policyOf returns action ref's policy from the read model, else from the
// log; ok is false when neither knows it (the caller has checked that it
// is defined, so only a failed read gets there, and the run will judge).
func (c *Service) policyOf(ctx context.Context, ref string) (domain.Policy, bool) {
	if c.Views != nil {
		if a, ok := c.Views.Action(ref); ok {
			return a.Policy, true
		}
	}
	a, err := c.LoadAction(ctx, ref)
	if err != nil || !a.Defined() {
		return domain.Policy{}, false
	}
	return a.Policy(), true
}

// withoutField returns input without its top-level field name (input as is
// when name is empty, absent, or input is not an object).
func withoutField(input json.RawMessage, name string) json.RawMessage {
	if name == "" || !bytes.Contains(input, []byte(name)) {
		return input
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(input, &fields); err != nil {
		return input
	}
	if _, ok := fields[name]; !ok {
		return input
	}
	delete(fields, name)
	out, err := json.Marshal(fields)
	if err != nil {
		return input
	}
	return out
}
