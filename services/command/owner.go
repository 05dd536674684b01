// Who requested an execution, and the rule that a client's token cancels
// only the executions its principal requested.
package command

import (
	"context"
	"errors"
	"fmt"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/services/repository"
)

// ErrNotYours: a principal that may cancel only its own executions asked to
// cancel another's (403); nothing was written.
var ErrNotYours = errors.New("not an execution this principal requested")

// Requester returns the principal that requested execution id, as its
// execution.requested records it; a with_items child's is its parent's. ok
// is false when none is recorded (an anonymous request, or one from before
// principals were recorded). An unknown id fails with ErrUnknownExecution.
func (c *Service) Requester(ctx context.Context, id string) (p domain.Principal, ok bool, err error) {
	for hop := 0; hop < 2; hop++ { // a child, then its parent: parents have no parent
		first, err := c.Store.ReadStream(ctx, domain.ExecutionStream(id), 0, 1)
		if errors.Is(err, eventstore.ErrStreamNotFound) || err == nil && len(first) == 0 {
			return p, false, fmt.Errorf("execution %s: %w", id, ErrUnknownExecution)
		}
		if err != nil {
			return p, false, storeError(err)
		}
		if p, ok, err := domain.PrincipalOf(&first[0]); err != nil || ok {
			return p, ok, err
		}
		ev, err := codec.Events.Decode(&first[0])
		if err != nil {
			return p, false, err
		}
		req, isReq := ev.(domain.ExecutionRequested)
		if !isReq || req.Parent == "" {
			return p, false, nil
		}
		id = req.Parent
	}
	return p, false, nil
}

// checkOwner refuses with ErrNotYours when the principal ctx carries may
// cancel only its own executions and did not request execution id.
func (c *Service) checkOwner(ctx context.Context, id string) error {
	me := repository.PrincipalFrom(ctx)
	if !me.OwnExecutionsOnly() {
		return nil
	}
	by, ok, err := c.Requester(ctx, id)
	if err != nil {
		return err
	}
	if !ok || by.Name != me.Name {
		return &marked{msg: fmt.Sprintf("execution %q was not requested by %s: a client token cancels only its own executions", id, me.Name), is: ErrNotYours}
	}
	return nil
}
