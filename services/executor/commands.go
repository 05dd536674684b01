package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/services/aggregate"
)

// Commands is the command side that the API (and `turnstile bench`) use:
// it decides with the domain's aggregates and appends with expected
// versions. It needs only the store, so any process can run it.
type Commands struct {
	Store eventstore.Store
	// Writer names the process in the events it writes.
	Writer string
}

// idempotencyNS derives execution ids from idempotency keys.
var idempotencyNS = uuid.MustParse("0b0e8f3c-58a4-4f0e-8f57-8c6f1d6f0d42")

// ErrIdempotencyMismatch is returned when an idempotency key is reused with a
// different request.
var ErrIdempotencyMismatch = errors.New("idempotency key already used for a different request")

// Request is a client's request for an execution.
type Request struct {
	Action         string
	Input          json.RawMessage
	ConcurrencyKey string
	IdempotencyKey string
	Parent         string
	ItemIndex      int
	Items          int
	Concurrency    int
}

// Request appends execution.requested and returns the new execution's id.
// With an idempotency key, the id is derived from the key, so a retry of the
// same request returns the same id (created is false), and a different
// request with the same key fails with ErrIdempotencyMismatch. The key lives
// in the log, so this holds across restarts.
func (c *Commands) Request(ctx context.Context, r Request) (id string, created bool, err error) {
	hash := requestHash(r)
	if r.IdempotencyKey != "" {
		id = uuid.NewSHA1(idempotencyNS, []byte(r.IdempotencyKey)).String()
	} else {
		u, err := uuid.NewV7()
		if err != nil {
			return "", false, fmt.Errorf("new execution id: %w", err)
		}
		id = u.String()
	}
	x := domain.NewExecution(id)
	ev, err := x.Request(domain.ExecutionRequested{
		Action: r.Action, Input: r.Input, ConcurrencyKey: r.ConcurrencyKey,
		Parent: r.Parent, ItemIndex: r.ItemIndex, Items: r.Items, Concurrency: r.Concurrency,
		IdempotencyKey: r.IdempotencyKey, RequestHash: hash,
	})
	if err != nil {
		return "", false, err
	}
	stream := domain.ExecutionStream(id)
	// A fresh event id, not one derived from the stream: a retry of the same
	// request must fail on "no stream" and be recognised by its hash below
	// (created false), not pass as the store's idempotent re-append of the
	// same event (which would report created again).
	env, err := domain.Catalogue.Encode(uuid.New(), ev, domain.OwnerExecutor, c.Writer)
	if err != nil {
		return "", false, err
	}
	_, err = c.Store.Append(ctx, stream, eventstore.NoStream, env)
	switch {
	case err == nil:
		return id, true, nil
	case errors.Is(err, eventstore.ErrWrongExpectedVersion) && r.IdempotencyKey != "":
		first, rerr := c.Store.ReadStream(ctx, stream, 0, 1)
		if rerr != nil || len(first) == 0 {
			return "", false, fmt.Errorf("idempotency key %q: read the first request: %w", r.IdempotencyKey, errors.Join(err, rerr))
		}
		prev, derr := domain.Catalogue.Decode(&first[0])
		if derr != nil {
			return "", false, derr
		}
		if p, ok := prev.(domain.ExecutionRequested); ok && p.RequestHash == hash {
			return id, false, nil
		}
		return "", false, fmt.Errorf("execution %s: %w", id, ErrIdempotencyMismatch)
	default:
		return "", false, fmt.Errorf("request execution: %w", err)
	}
}

// requestHash identifies a request's content for idempotency checks.
func requestHash(r Request) string {
	h := sha256.New()
	b, _ := json.Marshal(struct {
		A, K, P string
		I       json.RawMessage
		N, C, X int
	}{r.Action, r.ConcurrencyKey, r.Parent, compactJSON(r.Input), r.Items, r.Concurrency, r.ItemIndex})
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func compactJSON(in json.RawMessage) json.RawMessage {
	if len(in) == 0 {
		return nil
	}
	var v any
	if json.Unmarshal(in, &v) != nil {
		return in
	}
	out, _ := json.Marshal(v) // map keys sorted: the same object hashes the same
	return out
}

// RequestCancel records a client's cancellation request. The executor acts
// on it before the handoff, the owning worker after it. Cancelling an
// execution that has ended fails with a *domain.RuleError (RuleTerminal).
func (c *Commands) RequestCancel(ctx context.Context, id, reason string) error {
	_, err := aggregate.UpdateExecution(ctx, c.Store, id, domain.OwnerAPI, c.Writer, nil, func(x *domain.Execution) (domain.Event, error) {
		ev, err := x.RequestCancel(reason)
		if errors.Is(err, domain.ErrCancelAlreadyAsked) {
			return nil, nil // asking again is harmless
		}
		return ev, err
	})
	return err
}

// LoadAction folds action ref's stream (an empty Action if it does not exist).
func (c *Commands) LoadAction(ctx context.Context, ref string) (*domain.Action, error) {
	a := domain.NewAction()
	if _, err := aggregate.Fold(ctx, c.Store, domain.ActionStream(ref), func(env *domain.Envelope, ev domain.Event) { a.Apply(ev, env.Version) }); err != nil {
		return nil, fmt.Errorf("load action %s: %w", ref, err)
	}
	return a, nil
}

// updateAction decides on the action's current state and appends, reloading
// after a lost race. It returns whether an event was written.
func (c *Commands) updateAction(ctx context.Context, ref string, decide func(a *domain.Action) (domain.Event, error)) (bool, error) {
	if err := domain.ValidateRef(ref); err != nil {
		return false, err
	}
	stream := domain.ActionStream(ref)
	for attempt := 0; ; attempt++ {
		a, err := c.LoadAction(ctx, ref)
		if err != nil {
			return false, err
		}
		ev, err := decide(a)
		if err != nil || ev == nil {
			return false, err
		}
		env, err := domain.Catalogue.Encode(aggregate.EventID(c.Writer, stream, a.Version()+1, ev.EventType()), ev, domain.OwnerAPI, c.Writer)
		if err != nil {
			return false, err
		}
		_, err = c.Store.Append(ctx, stream, aggregate.Expected(a.Version()), env)
		if err == nil {
			return true, nil
		}
		if !aggregate.LostRace(err) || attempt >= aggregate.MaxRetries {
			return false, fmt.Errorf("append %s to %s: %w", ev.EventType(), stream, err)
		}
	}
}

// DefineAction defines an action. created is false when the same policy was
// already defined; a different existing policy fails with domain.ErrConflict.
func (c *Commands) DefineAction(ctx context.Context, p domain.Policy) (created bool, err error) {
	return c.updateAction(ctx, p.Ref, func(a *domain.Action) (domain.Event, error) { return a.Define(p) })
}

// ChangePolicy replaces an action's policy from the next grant on.
func (c *Commands) ChangePolicy(ctx context.Context, p domain.Policy) (changed bool, err error) {
	return c.updateAction(ctx, p.Ref, func(a *domain.Action) (domain.Event, error) { return a.ChangePolicy(p) })
}

// Pause stops grants for an action.
func (c *Commands) Pause(ctx context.Context, ref, reason string) (bool, error) {
	return c.updateAction(ctx, ref, func(a *domain.Action) (domain.Event, error) { return a.Pause(reason) })
}

// Resume lets grants for an action start again.
func (c *Commands) Resume(ctx context.Context, ref string) (bool, error) {
	return c.updateAction(ctx, ref, func(a *domain.Action) (domain.Event, error) { return a.Resume() })
}
