// Package command is turnstile's command side: it validates what a client
// asks (define, change, pause and resume an action; request and cancel an
// execution), refuses what must be refused before anything is written, and
// appends the domain's decisions to the log with expected versions. The
// API and `turnstile bench` call it; it needs only the store (and, for the
// API's early refusals, the read model), so any process can run it.
package command

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/repository"
	"github.com/turnstile/turnstile/services/runner"
)

// Service is the command side that the API (and `turnstile bench`) use:
// it decides with the domain's aggregates and appends with expected
// versions.
type Service struct {
	Store eventstore.Store
	// Writer names the process in the events it writes.
	Writer string
	// NewID, if set, gives every fresh id the commands need (execution ids
	// without an idempotency key, and the event ids of requests and action
	// changes), so a simulation replays exactly. Nil: random ids (UUIDv7
	// for execution ids).
	NewID func() uuid.UUID
	// Views, if set, is the read model the API's commands (Submit, Cancel)
	// consult: to refuse early what the log would refuse anyway, and to
	// answer with an execution's status.
	Views *projections.Views
	// Log, if set, receives the warnings of the command side: an action
	// defined or changed to a runner no live worker serves.
	Log *slog.Logger
	// History, if set, is the archive and the live log read as one
	// (archive.History). A request with an idempotency key whose execution
	// has left the live log for the archive is then answered from it as a
	// retry (or refused, with another body), instead of being requested
	// again under the same id, which would run it twice and write a second
	// life into a stream that has ended. It costs a request with a key new
	// to the live log a look-up in the indexes of the archive's segments of
	// the key's window (KeyWindow; archive.History.FirstEvent). Nil: a key
	// holds while its execution is in the live log.
	History eventstore.Store
	// Now, if set, is the clock idempotency keys are dated by (KeyWindow);
	// nil: the machine's.
	Now func() time.Time

	// bases keeps the newest checkpoint's state for the streams whose
	// start was archived (repository.FoldFromBase).
	bases repository.Bases
}

func (c *Service) freshID() uuid.UUID {
	if c.NewID != nil {
		return c.NewID()
	}
	return uuid.New()
}

// idempotencyNS derives execution ids from idempotency keys.
var idempotencyNS = uuid.MustParse("0b0e8f3c-58a4-4f0e-8f57-8c6f1d6f0d42")

// Errors the API maps to responses; match them with errors.Is.
var (
	// ErrIdempotencyMismatch: an idempotency key reused with a different request (409).
	ErrIdempotencyMismatch = errors.New("idempotency key already used for a different request")
	// ErrUnknownExecution: no execution has that id (404). It wraps domain.ErrNotFound.
	ErrUnknownExecution = fmt.Errorf("unknown execution: %w", domain.ErrNotFound)
	// ErrUnknownAction: no action has that ref (404). It wraps domain.ErrNotFound.
	ErrUnknownAction = fmt.Errorf("unknown action: %w", domain.ErrNotFound)
	// ErrAlreadyEnded: the execution has already ended, so there is nothing to
	// cancel; nothing was written (409). It wraps domain.ErrAlreadyTerminal.
	ErrAlreadyEnded = fmt.Errorf("execution already ended: %w", domain.ErrAlreadyTerminal)
	// ErrInvalidRequest: the request is malformed (400).
	ErrInvalidRequest = domain.ErrInvalidRequest
	// ErrInvalidPolicy: the policy is malformed (400).
	ErrInvalidPolicy = domain.ErrInvalidPolicy
	// ErrConflict: the action exists with a different policy (409).
	ErrConflict = domain.ErrConflict
)

// Request is a client's request for an execution.
//
// The concurrency key is not part of the request: the executor derives it
// from Input with the action's policy in force at the request's position in
// the log (domain.Policy.KeyOf); a request whose input lacks the key field is
// rejected in the log with code invalid_input.
//
// WithItems makes the request a with_items parent: the executor requests one
// child execution of the same action per item, in item order, with at most
// Concurrency of them in flight (requested and not ended; 0: no window of its
// own). A child's input is an object item merged over Input, or Input with
// the field "item" set to any other item. Children queue and take slots like
// any request of the action (its limit, queue length, rate limit, pause and
// on_limit apply to them; a rejected child counts as failed). The parent
// completes when every child completed, fails (code items_failed) when any
// did not, and a cancellation of the parent is passed on to its children.
type Request struct {
	Action         string
	Input          json.RawMessage
	IdempotencyKey string
	WithItems      []json.RawMessage
	Concurrency    int

	// Deprecated: the key is derived from Input; a request that sets it is
	// refused with ErrInvalidRequest.
	ConcurrencyKey string
	// Deprecated: children are requested by the executor; a request that
	// sets Parent or ItemIndex is refused with ErrInvalidRequest.
	Parent    string
	ItemIndex int
	// Deprecated: use WithItems. If set, it must equal len(WithItems).
	Items int

	// Priority is 1..4 (1 first; 0: the default, 2). RunAt or DelaySeconds
	// (from the request's log time) keep it out of its FIFO until then.
	Priority     int
	RunAt        *time.Time
	DelaySeconds float64

	// Traceparent is the W3C trace context the request was made in (""
	// for none): the execution.requested event's metadata keeps it. It is
	// not part of the request's identity (an idempotent retry may carry
	// another).
	Traceparent string
}

// KeyWindow is how long an idempotency key holds at least: a request with a
// key is a retry of the one that key named within the last KeyWindow (by
// the clocks of the API processes, which may differ by less than a
// KeyWindow), however long ago that execution ended and was archived. A key
// names one execution per KeyWindow-long period (a UTC day): a request
// dated in day d looks for the key's executions of days d-1, d and d+1 (the
// last one for a process whose clock runs ahead), and is a new execution of
// day d if there is none. So a key holds for 24 to 48 hours, then may name a
// new execution, with an id of its own: a stream never gets a second life.
// The look-up in the archive is bounded by that window: it reads the
// segments of the last two days, not seven years of them.
const KeyWindow = 24 * time.Hour

// keyDay is the period of KeyWindow that t is in.
func keyDay(t time.Time) int64 {
	return int64(math.Floor(float64(t.Unix()) / KeyWindow.Seconds()))
}

// IDForKey returns the id of the execution requested with idempotency key
// key by the anonymous caller in day (see IDForPrincipalKey).
func IDForKey(key string, day int64) string {
	return uuid.NewSHA1(idempotencyNS, []byte(key+"\x00day:"+strconv.FormatInt(day, 10))).String()
}

// IDForPrincipalKey returns the id of the execution that principal p
// requests with idempotency key key in day (a period of KeyWindow since the
// Unix epoch). Keys are scoped per principal: the same key from two
// principals names two executions, so one caller can never obtain
// another's execution by sending its key. The anonymous caller's ids are
// IDForKey's.
func IDForPrincipalKey(p domain.Principal, key string, day int64) string {
	if p.Name == "" {
		return IDForKey(key, day)
	}
	return uuid.NewSHA1(idempotencyNS, []byte("principal:"+p.Name+"\x00"+key+"\x00day:"+strconv.FormatInt(day, 10))).String()
}

// keyIDs returns the ids a request of p with key at now may be a retry of:
// the id it gets if new first (its day's), then those of the day before and
// the day after.
func keyIDs(p domain.Principal, key string, now time.Time) []string {
	d := keyDay(now)
	return []string{IDForPrincipalKey(p, key, d), IDForPrincipalKey(p, key, d-1), IDForPrincipalKey(p, key, d+1)}
}

func (c *Service) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Request appends execution.requested and returns the new execution's id.
// With an idempotency key, the id is derived from the key, so a retry of the
// same request returns the same id (created is false), and a different
// request with the same key fails with ErrIdempotencyMismatch. The key lives
// in the log, so this holds across restarts.
//
// The request records the principal ctx carries (repository.WithPrincipal)
// in its metadata, and its idempotency key is that principal's
// (IDForPrincipalKey).
func (c *Service) Request(ctx context.Context, r Request) (id string, created bool, err error) {
	d, err := c.decideRequest(r, repository.PrincipalFrom(ctx))
	if err != nil {
		return "", false, err
	}
	return c.record(ctx, r, &d)
}

// requestDecision is a request the domain accepted, ready to append.
type requestDecision struct {
	id, stream, hash string
	env              domain.Envelope
	at               time.Time // when it was decided
	keyIDs           []string  // with a key: the ids it may be a retry of (keyIDs)
}

// decideRequest checks r with the domain's rule and encodes its
// execution.requested; nothing is written.
func (c *Service) decideRequest(r Request, p domain.Principal) (d requestDecision, err error) {
	switch {
	case r.ConcurrencyKey != "":
		return d, fmt.Errorf("%w: the concurrency key is derived from the input by the action's policy", ErrInvalidRequest)
	case r.Parent != "" || r.ItemIndex != 0:
		return d, fmt.Errorf("%w: with_items children are requested by the executor", ErrInvalidRequest)
	case r.WithItems != nil && len(r.WithItems) == 0: // the domain sees no items: a plain request
		return d, fmt.Errorf("%w: with_items holds no items; it must hold 1..%d", ErrInvalidRequest, domain.MaxItems)
	case bytes.Equal(bytes.TrimSpace(r.Input), []byte("null")):
		// the domain reads null in old events as no input; a new request says what it means
		return d, fmt.Errorf("%w: input must be a JSON object, not null (leave it out for none)", ErrInvalidRequest)
	}
	// only a request with an idempotency key can be retried into its stream
	if r.IdempotencyKey != "" {
		d.hash, d.at = requestHash(r), c.now()
		d.keyIDs = keyIDs(p, r.IdempotencyKey, d.at)
		d.id = d.keyIDs[0]
	} else if c.NewID != nil {
		d.id = c.NewID().String()
	} else {
		u, err := uuid.NewV7()
		if err != nil {
			return d, fmt.Errorf("new execution id: %w", err)
		}
		d.id = u.String()
	}
	delay, err := domain.DelayMillisOf(r.DelaySeconds)
	if err != nil {
		return d, err
	}
	var runAt string
	if r.RunAt != nil {
		runAt = domain.FormatRunAt(*r.RunAt)
	}
	x := domain.NewExecution(d.id)
	ev, err := x.Request(domain.ExecutionRequested{
		Action: r.Action, Input: r.Input, Items: r.Items, Concurrency: r.Concurrency, WithItems: r.WithItems,
		IdempotencyKey: r.IdempotencyKey, RequestHash: d.hash,
		Priority: r.Priority, RunAt: runAt, DelayMillis: delay,
	})
	if err != nil {
		return d, err
	}
	d.stream = domain.ExecutionStream(d.id)
	// A fresh event id, not one derived from the stream: a retry of the same
	// request must fail on "no stream" and be recognised by its hash below
	// (created false), not pass as the store's idempotent re-append of the
	// same event (which would report created again).
	d.env, err = codec.Events.Encode(domain.LocalEventID(c.freshID(), d.stream), ev, domain.OwnerExecutor, c.Writer)
	d.env.Metadata = domain.WithTraceparent(domain.PrincipalMetadata(p), r.Traceparent)
	return d, err
}

// record appends a decided request: see Request.
func (c *Service) record(ctx context.Context, r Request, d *requestDecision) (id string, created bool, err error) {
	id, stream := d.id, d.stream
	if r.IdempotencyKey != "" {
		since := time.Unix((keyDay(d.at)-1)*int64(KeyWindow/time.Second), 0).Add(-KeyWindow / 24) // day d-1's start, less an hour of log time's lag
		for _, kid := range d.keyIDs {
			if kid == id && c.History == nil {
				continue // the append below finds it
			}
			first, found, err := c.archived(ctx, domain.ExecutionStream(kid), since)
			if err != nil {
				return "", false, fmt.Errorf("idempotency key %q: %w", r.IdempotencyKey, err)
			}
			if found {
				return c.retried(kid, d.hash, first)
			}
		}
	}
	_ = codec.Events.Remember(&d.env) // for this process's folds
	_, err = c.Store.Append(ctx, stream, eventstore.NoStream, d.env)
	switch {
	case err == nil:
		return id, true, nil
	case errors.Is(err, eventstore.ErrWrongExpectedVersion) && r.IdempotencyKey != "":
		first, rerr := c.Store.ReadStream(ctx, stream, 0, 1)
		if rerr != nil || len(first) == 0 {
			return "", false, fmt.Errorf("idempotency key %q: read the first request: %w", r.IdempotencyKey, errors.Join(err, rerr))
		}
		return c.retried(id, d.hash, &first[0])
	default:
		return "", false, fmt.Errorf("request execution: %w", err)
	}
}

// archived returns the first event of stream, the execution's request, if
// the log holds it already: read from the live log when it has the stream
// from its start, else from History (the archive holds its start). A found
// stream is answered without an append: an append would race the trim that
// could make the live log forget it between the read and the append.
func (c *Service) archived(ctx context.Context, stream string, since time.Time) (*domain.Envelope, bool, error) {
	live, err := c.Store.ReadStream(ctx, stream, 0, 1)
	switch {
	case err == nil && len(live) > 0 && live[0].Version == 0:
		return &live[0], true, nil
	case err != nil && !errors.Is(err, eventstore.ErrStreamNotFound):
		return nil, false, fmt.Errorf("look in the live log: %w", err) // (an append now might run it again)
	case c.History == nil:
		return nil, false, nil
	}
	// Not in the live log, or kept there from a later event on.
	if h, ok := c.History.(firstEventer); ok {
		first, found, err := h.FirstEvent(ctx, stream, since)
		if err != nil {
			return nil, false, fmt.Errorf("look in the archive: %w", err)
		}
		return first, found, nil
	}
	first, err := c.History.ReadStream(ctx, stream, 0, 1)
	switch {
	case errors.Is(err, eventstore.ErrStreamNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("look in the archive: %w", err)
	case len(first) == 0:
		return nil, false, nil
	}
	return &first[0], true, nil
}

// firstEventer is what History offers beyond a Store for the look-up of a
// key (archive.History): a stream's first event, reading only the segments
// whose log times reach since, unless the stream has events in one.
type firstEventer interface {
	FirstEvent(ctx context.Context, stream string, since time.Time) (*domain.Envelope, bool, error)
}

// retried answers a request with an idempotency key whose execution id
// already has a first event: a retry of the same request (created false),
// or ErrIdempotencyMismatch.
func (c *Service) retried(id, hash string, first *domain.Envelope) (string, bool, error) {
	prev, err := codec.Events.Decode(first)
	if err != nil {
		return "", false, err
	}
	if p, ok := prev.(domain.ExecutionRequested); ok && p.RequestHash == hash {
		return id, false, nil
	}
	return "", false, fmt.Errorf("execution %s: %w", id, ErrIdempotencyMismatch)
}

// requestHash identifies a request's content for idempotency checks.
func requestHash(r Request) string {
	h := sha256.New()
	items := make([]json.RawMessage, len(r.WithItems))
	for i, it := range r.WithItems {
		items[i] = compactJSON(it)
	}
	b, _ := json.Marshal(struct {
		A  string
		I  json.RawMessage
		C  int
		WI []json.RawMessage `json:",omitempty"`
		P  int               `json:",omitempty"`
		RA *time.Time        `json:",omitempty"`
		D  float64           `json:",omitempty"`
	}{r.Action, compactJSON(r.Input), r.Concurrency, items, r.Priority, r.RunAt, r.DelaySeconds})
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

// RequestCancel records a client's cancellation request, in any state
// before the end: the executor acts on it before the handoff (a waiter
// leaves its queue, a granted execution releases its slot) and for a
// with_items parent (its children are asked to cancel too); after the
// handoff the owning worker stops the run and records execution.cancelled.
// Asking again is a no-op. An unknown id fails with ErrUnknownExecution; an
// execution that has already ended fails with ErrAlreadyEnded (it also
// matches the *domain.RuleError that refused it) and nothing is written.
func (c *Service) RequestCancel(ctx context.Context, id, reason string) error {
	x, err := repository.UpdateExecution(ctx, c.Store, id, domain.OwnerAPI, c.Writer, nil, func(x *domain.Execution) (domain.Event, error) {
		ev, err := x.RequestCancel(reason)
		if errors.Is(err, domain.ErrCancelAlreadyAsked) {
			return nil, nil // asking again is harmless
		}
		return ev, err
	})
	switch {
	case errors.Is(err, domain.ErrNotFound):
		return fmt.Errorf("cancel execution %s: %w", id, ErrUnknownExecution)
	case errors.Is(err, domain.ErrAlreadyTerminal) && x != nil:
		return fmt.Errorf("cancel execution %s: it ended as %s: %w (%w)", id, x.Status(), ErrAlreadyEnded, err)
	}
	return err
}

// LoadExecution folds execution id's stream. An unknown id fails with
// ErrUnknownExecution.
func (c *Service) LoadExecution(ctx context.Context, id string) (*domain.Execution, error) {
	x, err := repository.LoadExecutionFrom(ctx, c.Store, &c.bases, id)
	if errors.Is(err, domain.ErrNotFound) {
		return nil, fmt.Errorf("load execution %s: %w", id, ErrUnknownExecution)
	}
	return x, err
}

// LoadAction folds action ref's stream (an empty Action if it does not exist).
func (c *Service) LoadAction(ctx context.Context, ref string) (*domain.Action, error) {
	a := domain.NewAction()
	base := func(st *projections.State) int64 { // its start was archived
		if b := st.Actions[ref]; b != nil {
			a = domain.RestoreAction(b.Snapshot())
		}
		return a.Version()
	}
	if _, err := repository.FoldFromBase(ctx, c.Store, &c.bases, domain.ActionStream(ref), base, func(env *domain.Envelope, ev domain.Event) { a.Apply(ev, env.Version) }); err != nil {
		return nil, fmt.Errorf("load action %s: %w", ref, err)
	}
	return a, nil
}

// updateAction decides on the action's current state and appends, reloading
// after a lost race. It returns the action after the change and whether an
// event was written. Every action event goes with a queue.action_changed on
// the action's queue stream, in the same atomic append: that moves the
// fence of grants, so a grant decided on the old policy or pause state fails
// and the change applies from the very next grant in the log.
//
// On a store without atomic multi-stream appends the queue.action_changed
// comes first, alone, and announces the change (it carries the action
// event); the action event follows at the action's expected version. The
// announcement moves the fence before the change exists, and the executor
// grants nothing from the queue while an announced change is missing from
// the action stream, so a grant is never decided on a policy older than the
// one in force at its position. If this process stops between the two
// appends, the executor appends the announced event itself (the same
// envelope: a late append of ours is then an idempotent replay).
func (c *Service) updateAction(ctx context.Context, ref string, decide ActionChange) (*domain.Action, bool, error) {
	if err := domain.ValidateRef(ref); err != nil {
		return nil, false, err
	}
	stream, qstream := domain.ActionStream(ref), domain.QueueStream(ref)
	for attempt := 0; ; attempt++ {
		a, err := c.LoadAction(ctx, ref)
		if err != nil {
			return nil, false, err
		}
		ev, err := decide(a)
		if errors.Is(err, domain.ErrNotFound) {
			return nil, false, fmt.Errorf("action %q: %w", ref, ErrUnknownAction)
		}
		if err != nil {
			return nil, false, err
		}
		if ev == nil {
			return a, false, nil
		}
		v := a.Version() + 1
		// Fresh event ids: two API processes (or requests) deciding different
		// changes at the same version must meet on the expected version, not
		// pass as a replay of each other's events. A retry after an unknown
		// outcome reloads and decides again, which writes nothing if the first
		// attempt landed.
		env, err := codec.Events.Encode(c.freshID(), ev, domain.OwnerAPI, c.Writer)
		if err != nil {
			return nil, false, err
		}
		env.Metadata = domain.PrincipalMetadata(repository.PrincipalFrom(ctx))
		fence := domain.QueueActionChanged{ActionVersion: uint64(v), Change: ev.EventType()}
		single := !eventstore.AtomicMultiStream(c.Store)
		if single {
			if fence.Event, err = json.Marshal(env); err != nil {
				return nil, false, err
			}
		}
		fenv, err := codec.Events.Encode(c.freshID(), fence, domain.OwnerAPI, c.Writer)
		if err != nil {
			return nil, false, err
		}
		fenv.Metadata = env.Metadata
		change := eventstore.StreamAppend{Stream: stream, Expected: repository.Expected(a.Version()), Events: []domain.Envelope{env}}
		if single {
			if _, err := c.Store.Append(ctx, qstream, eventstore.Any, fenv); err != nil {
				return nil, false, fmt.Errorf("announce %s on %s: %w", ev.EventType(), qstream, err)
			}
			_, err = c.Store.Append(ctx, change.Stream, change.Expected, change.Events...)
		} else {
			_, err = c.Store.AppendMulti(ctx, change,
				eventstore.StreamAppend{Stream: qstream, Expected: eventstore.Any, Events: []domain.Envelope{fenv}})
		}
		if err == nil {
			a.Apply(ev, uint64(v))
			return a, true, nil
		}
		if !repository.LostRace(err) || attempt >= repository.MaxRetries {
			return nil, false, fmt.Errorf("append %s to %s: %w", ev.EventType(), stream, err)
		}
	}
}

// DefineAction defines an action. created is false when the same policy was
// already defined; a different existing policy fails with domain.ErrConflict.
func (c *Service) DefineAction(ctx context.Context, p domain.Policy) (created bool, err error) {
	_, created, err = c.ChangeAction(ctx, p.Ref, Define(p))
	return created, err
}

// ChangePolicy replaces an action's policy from the next grant on. An
// unknown action fails with ErrUnknownAction.
func (c *Service) ChangePolicy(ctx context.Context, p domain.Policy) (changed bool, err error) {
	_, changed, err = c.ChangeAction(ctx, p.Ref, SetPolicy(p))
	return changed, err
}

// Pause stops grants for an action: nothing is granted while it is paused,
// running executions go on, requests still queue. An unknown action fails
// with ErrUnknownAction.
func (c *Service) Pause(ctx context.Context, ref, reason string) (bool, error) {
	_, wrote, err := c.ChangeAction(ctx, ref, Pause(reason))
	return wrote, err
}

// Resume lets grants for an action start again. An unknown action fails
// with ErrUnknownAction.
func (c *Service) Resume(ctx context.Context, ref string) (bool, error) {
	_, wrote, err := c.ChangeAction(ctx, ref, Resume())
	return wrote, err
}

// ActionChange decides one change of an action on its current state (a nil
// event: nothing to change). Define, SetPolicy, Pause and Resume make them.
type ActionChange func(a *domain.Action) (domain.Event, error)

// Define defines the action with policy p (see DefineAction). A
// runner_config that the built-in runner it names would refuse is
// ErrInvalidPolicy (checkRunnerConfig).
func Define(p domain.Policy) ActionChange {
	return func(a *domain.Action) (domain.Event, error) { return checkRunnerConfig(a.Define(p)) }
}

// SetPolicy replaces the action's policy with p (see ChangePolicy), with
// the same check of its runner_config as Define.
func SetPolicy(p domain.Policy) ActionChange {
	return func(a *domain.Action) (domain.Event, error) { return checkRunnerConfig(a.ChangePolicy(p)) }
}

// checkRunnerConfig passes on a decided definition or policy change unless
// the built-in runner it names refuses its runner_config
// (runner.ValidateConfig): then nothing is written and the error wraps
// ErrInvalidPolicy. Other runners' configs are theirs to read.
func checkRunnerConfig(ev domain.Event, err error) (domain.Event, error) {
	var p domain.Policy
	switch e := ev.(type) {
	case domain.ActionDefined:
		p = e.Policy
	case domain.ActionPolicyChanged:
		p = e.Policy
	default:
		return ev, err
	}
	if cerr := runner.ValidateConfig(p.Runner, p.RunnerConfig); cerr != nil {
		return nil, fmt.Errorf("%w: runner_config of %s: %v", ErrInvalidPolicy, p.Runner, cerr)
	}
	return ev, err
}

// Pause stops grants for the action (see Service.Pause).
func Pause(reason string) ActionChange {
	return func(a *domain.Action) (domain.Event, error) { return a.Pause(reason) }
}

// Resume lets grants for the action start again (see Service.Resume).
func Resume() ActionChange {
	return func(a *domain.Action) (domain.Event, error) { return a.Resume() }
}

// ChangeAction applies change to action ref and returns the action as the
// log holds it after the change (or as it was, when there was nothing to
// change) and whether an event was written. An unknown action fails with
// ErrUnknownAction (except for Define), a different existing policy given
// to Define with domain.ErrConflict.
func (c *Service) ChangeAction(ctx context.Context, ref string, change ActionChange) (*domain.Action, bool, error) {
	checked := func(a *domain.Action) (domain.Event, error) {
		ev, err := change(a)
		if err == nil {
			if cerr := c.checkNeeds(ctx, ev); cerr != nil {
				return nil, cerr
			}
		}
		return ev, err
	}
	a, wrote, err := c.updateAction(ctx, ref, checked)
	if err == nil && wrote {
		c.warnUnserved(a)
	}
	return a, wrote, storeError(err)
}
