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
//
// A request for an action that needs a keyed resource must carry the
// resource's key_field (ErrInvalidRequest otherwise); that field, too, is
// the action's and is left out of the runner's check.
func (c *Service) checkInput(ctx context.Context, r Request) error {
	p, ok := c.policyOf(ctx, r.Action)
	if !ok {
		return nil
	}
	var keyFields []string
	for _, n := range p.Resources {
		res, err := c.resourceOf(ctx, n.Name)
		if err != nil || res.KeyField == "" {
			continue
		}
		keyFields = append(keyFields, res.KeyField)
	}
	if !strings.HasPrefix(p.Runner, "core.") && keyFields == nil {
		return nil
	}
	check := func(input json.RawMessage) error {
		for _, f := range keyFields {
			if _, err := (domain.ResourceLimit{KeyField: f}).KeyOf(input); err != nil {
				return fmt.Errorf("%w (a key_field of a resource the action needs)", err)
			}
		}
		if !strings.HasPrefix(p.Runner, "core.") {
			return nil
		}
		input = withoutField(input, p.ConcurrencyKey)
		for _, f := range keyFields {
			input = withoutField(input, f)
		}
		if err := runner.ValidateInput(p.Runner, p.RunnerConfig, input); err != nil {
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

// resourceOf returns resource name's limit from the read model, else from
// the log (a zero limit for one that does not exist).
func (c *Service) resourceOf(ctx context.Context, name string) (domain.ResourceLimit, error) {
	if c.Views != nil {
		if l, ok := c.Views.ResourceLimit(name); ok {
			return l, nil
		}
	}
	r, err := c.LoadResource(ctx, name)
	if err != nil || !r.Defined() {
		return domain.ResourceLimit{}, err
	}
	return r.Limit(), nil
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
