// The API's commands on executions, in one call each: the request refused
// early (nothing written) when its action is undefined or its queue would
// refuse it anyway, and the cancellation, both answered with the status the
// read model gives.
package command

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/repository"
)

// Accepted is the answer to an execution command.
type Accepted struct {
	ID string
	// Created is false for a retry of a request already recorded (the same
	// idempotency key and the same request).
	Created bool
	// Status is the execution's status as the read model knows it
	// (StatusRequested for a request just recorded).
	Status domain.Status
}

// ErrRefused is matched by every *RefusedError.
var ErrRefused = errors.New("refused; nothing was recorded")

// RefusedError is a request refused before anything was written, because
// its action's queue (as the read model last folded it) would refuse it:
// the queue is full, or on_limit is reject and no slot is free or the rate
// limit is reached.
type RefusedError struct {
	Code       string        // domain.RejectQueueFull, RejectNoSlot or RejectRateLimited
	Reason     string        // why, for a person
	RetryAfter time.Duration // for RejectRateLimited: when room comes back
}

func (e *RefusedError) Error() string { return e.Reason + "; nothing was recorded" }

// Unwrap makes a RefusedError match ErrRefused.
func (e *RefusedError) Unwrap() error { return ErrRefused }

// Submit is a client's request through the API: the domain's checks of
// Request (ErrInvalidRequest); then, with nothing written, an undefined
// action fails with ErrUnknownAction and a request the action's queue would
// refuse as the read model last folded it fails with a *RefusedError, so a
// flood of requests to one action costs the log nothing and other actions
// keep flowing. Requests that pass on a read model a little behind are
// still judged by the executor's fold at their position and end rejected.
// A retry of a request already recorded (same idempotency key) is not
// refused early: it gets its answer. A with_items parent takes no slot; its
// children are judged one by one. An input the action's built-in runner
// would refuse at run time fails with ErrInvalidRequest, saying the shape
// it expects (checkInput). With no Views, only the domain's checks
// apply before the append. now is the time the rate limit is judged at.
func (c *Service) Submit(ctx context.Context, r Request, now time.Time) (Accepted, error) {
	p := repository.PrincipalFrom(ctx)
	d, err := c.decideRequest(r, p)
	if err != nil {
		return Accepted{}, err
	}
	if c.Views != nil {
		if err := c.defined(ctx, r.Action); err != nil {
			return Accepted{}, err
		}
		if err := c.checkInput(ctx, r); err != nil {
			return Accepted{}, err
		}
		if err := c.refuseEarly(ctx, r, d.keyIDs, now); err != nil {
			return Accepted{}, err
		}
	}
	id, created, err := c.record(ctx, r, &d)
	if err != nil {
		return Accepted{}, storeError(err)
	}
	a := Accepted{ID: id, Created: created, Status: domain.StatusRequested}
	if !created && c.Views != nil {
		if v, ok := c.Views.View(id); ok {
			a.Status = v.Status
		} else if c.History != nil { // archived (see History)
			if v, ok, err := projections.ExecutionAsOf(ctx, c.History, id, projections.Cut{Position: math.MaxUint64}); err == nil && ok {
				a.Status = v.Status
			}
		}
	}
	return a, nil
}

// defined fails with ErrUnknownAction unless action ref is defined: from
// the read model when it knows the action (actions are never undefined, so
// that answer cannot be stale), else from the log.
func (c *Service) defined(ctx context.Context, ref string) error {
	if _, ok := c.Views.Action(ref); ok {
		return nil
	}
	a, err := c.LoadAction(ctx, ref)
	if err != nil {
		return storeError(err)
	}
	if !a.Defined() {
		return &marked{msg: fmt.Sprintf("action %q is not defined", ref), is: ErrUnknownAction}
	}
	return nil
}

// refuseEarly returns a *RefusedError for a request the read model says its
// queue would refuse (see Submit).
func (c *Service) refuseEarly(ctx context.Context, r Request, keyIDs []string, now time.Time) error {
	if r.WithItems != nil {
		return nil
	}
	code, reason, retryAfter := c.Views.Refusal(r.Action, r.Input, now)
	if code == "" {
		return nil
	}
	for _, id := range keyIDs { // a retry of a request the log took is answered as one
		if _, ok := c.Views.View(id); ok {
			return nil
		}
		if _, err := c.Store.ReadStream(ctx, domain.ExecutionStream(id), 0, 1); err == nil {
			return nil
		}
	}
	return &RefusedError{Code: code, Reason: reason, RetryAfter: retryAfter}
}

// Cancel is a client's cancellation through the API: RequestCancel with
// reason ("cancelled by a client" when empty), answered with the status the
// read model gives once it has folded the log as it was after the request.
// An unknown id fails with ErrUnknownExecution, an execution that has ended
// with ErrAlreadyEnded, and one the principal ctx carries may not cancel
// (a client's token asking for another principal's execution) with
// ErrNotYours; nothing is written then.
func (c *Service) Cancel(ctx context.Context, id, reason string) (Accepted, error) {
	if reason == "" {
		reason = "cancelled by a client"
	}
	err := c.checkOwner(ctx, id)
	if err == nil {
		err = c.RequestCancel(ctx, id, reason)
	}
	switch {
	case errors.Is(err, ErrUnknownExecution):
		return Accepted{}, &marked{msg: fmt.Sprintf("no execution %q", id), is: ErrUnknownExecution}
	case errors.Is(err, domain.ErrAlreadyTerminal):
		return Accepted{}, &marked{msg: fmt.Sprintf("execution %q has already ended; there is nothing to cancel", id), is: ErrAlreadyEnded}
	case err != nil:
		return Accepted{}, storeError(err)
	}
	a := Accepted{ID: id, Status: domain.StatusRequested}
	if c.Views != nil {
		c.Views.AwaitHead(ctx, c.Store)
		if v, ok := c.Views.View(id); ok {
			a.Status = v.Status
		}
	}
	return a, nil
}

// marked is an error with the message a client reads that matches a
// sentinel of this package.
type marked struct {
	msg string
	is  error
}

func (m *marked) Error() string { return m.msg }
func (m *marked) Unwrap() error { return m.is }

// ErrUnavailable: the log cannot be written or read now (503). It wraps
// eventstore.ErrClosed.
var ErrUnavailable = fmt.Errorf("log unavailable: %w", eventstore.ErrClosed)

// storeError marks a store error the API answers specially with the
// sentinel of this package that stands for it, keeping its message: the
// store refusing the event (ErrInvalidRequest), the store closed
// (ErrUnavailable).
func storeError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, eventstore.ErrInvalidStream), errors.Is(err, eventstore.ErrInvalidEvent), errors.Is(err, eventstore.ErrEventTooLarge):
		return &classified{err: err, kind: ErrInvalidRequest}
	case errors.Is(err, eventstore.ErrClosed), errors.Is(err, eventstore.ErrUnavailable):
		return &classified{err: err, kind: ErrUnavailable}
	}
	return err
}

// classified is err that also matches kind; its message is err's.
type classified struct{ err, kind error }

func (c *classified) Error() string   { return c.err.Error() }
func (c *classified) Unwrap() []error { return []error{c.err, c.kind} }

// WithViews returns a copy of c whose API commands consult views (see
// Service.Views).
func (c *Service) WithViews(views *projections.Views) *Service {
	// (Every field but the checkpoint cache, which the copy keeps its own.)
	return &Service{Store: c.Store, Writer: c.Writer, NewID: c.NewID, Views: views, Log: c.Log, History: c.History, Now: c.Now}
}
