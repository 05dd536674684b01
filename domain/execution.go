package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Limits on an execution request.
const (
	MaxInputBytes = 256 << 10 // bytes of an execution's JSON input
	MaxReasonLen  = 1000      // bytes of a reason or error message kept in an event
	MaxIDLen      = 100       // bytes of an execution or worker id
	MaxItems      = 10_000    // items of a with_items request
	MaxItemsBytes = 512 << 10 // bytes of a with_items request's items together
)

// Limits on an execution's result: what a worker may record with its end.
const (
	// DefaultMaxResultBytes is the default bound on a result's bytes
	// (turnstile serve and worker --max-result-bytes).
	DefaultMaxResultBytes = 256 << 10
	// MaxResultBytesLimit is the largest bound a process may be given: the
	// result, the error and the rest of the event stay within one event
	// (eventstore.MaxEventSize, 1 MiB).
	MaxResultBytesLimit = 768 << 10
)

// Errors of execution commands other than handoff-rule refusals.
var (
	ErrInvalidRequest     = errors.New("invalid request")
	ErrAttemptsExhausted  = errors.New("no attempts left")
	ErrHandoffNotExpired  = errors.New("handoff has not expired yet")
	ErrCancelAlreadyAsked = errors.New("cancellation already requested")
	// ErrResultTooLarge is wrapped by CheckResult's refusal.
	ErrResultTooLarge = errors.New("result too large")
)

// CheckResult refuses a result of more than max bytes (max <= 0:
// DefaultMaxResultBytes) with an error that wraps ErrResultTooLarge and
// gives both sizes.
func CheckResult(result []byte, max int) error {
	if max <= 0 {
		max = DefaultMaxResultBytes
	}
	if len(result) > max {
		return fmt.Errorf("%w: the result is %d bytes, the limit is %d (--max-result-bytes)", ErrResultTooLarge, len(result), max)
	}
	return nil
}

// childNS derives the ids of a with_items parent's children.
var childNS = uuid.MustParse("2f7d0c1e-8b1a-4a55-9a0e-5d2b8c7e41f3")

// ChildID returns the execution id of item index of with_items parent
// parent. Ids are derived, so every executor agrees on them and requesting
// the same child twice fails on the stream's expected version.
func ChildID(parent string, index int) string {
	return uuid.NewSHA1(childNS, []byte(parent+"/"+strconv.Itoa(index))).String()
}

// ChildInput returns the input of a with_items child: an object item merged
// over the parent's input (the item's fields win); any other item is put in
// the parent's input under the field "item".
func ChildInput(parent, item json.RawMessage) (json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	if t := bytes.TrimSpace(parent); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		if err := json.Unmarshal(t, &fields); err != nil {
			return nil, fmt.Errorf("%w: parent input: %w", ErrInvalidRequest, err)
		}
	}
	t := bytes.TrimSpace(item)
	if !json.Valid(t) {
		return nil, fmt.Errorf("%w: item is not valid JSON", ErrInvalidRequest)
	}
	if len(t) > 0 && t[0] == '{' {
		var over map[string]json.RawMessage
		if err := json.Unmarshal(t, &over); err != nil {
			return nil, fmt.Errorf("%w: item: %w", ErrInvalidRequest, err)
		}
		for k, v := range over {
			fields[k] = v
		}
	} else {
		fields["item"] = json.RawMessage(t)
	}
	out, err := json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("%w: child input: %w", ErrInvalidRequest, err)
	}
	return out, nil
}

// Execution is the aggregate of one execution-<id> stream. Its commands
// check the handoff rule and return the event to append; Apply folds events
// without checking anything, so replay never re-validates.
type Execution struct {
	id          string
	action      string
	key         string
	parentID    string
	itemIndex   int
	parent      bool // a with_items parent: the executor owns it from start to end
	items       int
	concurrency int
	withItems   []json.RawMessage
	asked       int // a parent's children requested so far (items 0..asked-1)
	input       json.RawMessage
	traceparent string // the request's W3C trace context (trace.go), or ""

	status          Status
	worker          string
	incarnation     string
	attempt         int
	cancelRequested bool
	cancelReason    string
	takenBack       string    // code of the last take-back: FailScheduledTimeout, FailWorkerLost or TakenBackRunFailed
	runs            int       // runs the current handoff allows in all (its retry.max_attempts; 0: 1)
	deferredUntil   time.Time // log time a backoff after a failed run, or a delayed request, ends (zero: eligible)
	priority        int       // the request's (0: DefaultPriority)
	version         int64

	requestedAt, grantedAt, scheduledAt, runningAt, endedAt time.Time
	scheduledTimeout                                        time.Duration

	result json.RawMessage
	errMsg string
	code   string
}

// NewExecution returns the state of execution id's stream before any event.
func NewExecution(id string) *Execution { return &Execution{id: id, version: -1} }

// ID returns the execution id.
func (x *Execution) ID() string { return x.id }

// Status returns the current state.
func (x *Execution) Status() Status { return x.status }

// Version returns the last applied stream version, -1 for none: the expected
// version of the next append.
func (x *Execution) Version() int64 { return x.version }

// Worker returns the worker named in the current handoff ("" before any).
func (x *Execution) Worker() string { return x.worker }

// Incarnation returns the worker incarnation named in the current handoff.
func (x *Execution) Incarnation() string { return x.incarnation }

// Attempt returns how many handoffs there have been.
func (x *Execution) Attempt() int { return x.attempt }

// Action returns the action ref the execution was requested for.
func (x *Execution) Action() string { return x.action }

// ConcurrencyKey returns the value that picks the execution's queue.
func (x *Execution) ConcurrencyKey() string { return x.key }

// IsParent reports whether this is a with_items parent.
func (x *Execution) IsParent() bool { return x.parent }

// Parent returns the with_items parent of a child ("" for any other execution).
func (x *Execution) Parent() string { return x.parentID }

// ItemIndex returns a child's item index in its parent.
func (x *Execution) ItemIndex() int { return x.itemIndex }

// Items returns how many items a with_items parent has.
func (x *Execution) Items() int { return x.items }

// Window returns how many children of a with_items parent may be in flight
// (requested and not ended) at once: its concurrency, or all its items when
// it gave none.
func (x *Execution) Window() int {
	if x.concurrency <= 0 || x.concurrency > x.items {
		return x.items
	}
	return x.concurrency
}

// Item returns a with_items parent's item i.
func (x *Execution) Item(i int) json.RawMessage {
	if i < 0 || i >= len(x.withItems) {
		return nil
	}
	return x.withItems[i]
}

// ChildrenRequested returns how many of a with_items parent's children have
// been requested (items 0..n-1), by its own stream.
func (x *Execution) ChildrenRequested() int { return x.asked }

// Children returns the ids of a with_items parent's children, in item
// order: one per item; the first ChildrenRequested of them exist.
func (x *Execution) Children() []string {
	if !x.parent {
		return nil
	}
	out := make([]string, x.items)
	for i := range out {
		out[i] = ChildID(x.id, i)
	}
	return out
}

// TakenBack returns the code of the last take-back from a worker
// (FailScheduledTimeout after a handoff expiry, FailWorkerLost after an
// abandonment), "" if there was none.
func (x *Execution) TakenBack() string { return x.takenBack }

// RequestedAt returns the log time of the request.
func (x *Execution) RequestedAt() time.Time { return x.requestedAt }

// Input returns the request's input.
func (x *Execution) Input() json.RawMessage { return x.input }

// CancelRequested reports whether a client asked to cancel it.
func (x *Execution) CancelRequested() bool { return x.cancelRequested }

// GrantedAt returns the log time of its grant (execution.scheduling), zero
// before one.
func (x *Execution) GrantedAt() time.Time { return x.grantedAt }

// CancelReason returns the reason given with the first cancellation
// request, or a generic one: what the execution.cancelled event records.
func (x *Execution) CancelReason() string {
	if x.cancelReason == "" {
		return "cancelled on request"
	}
	return x.cancelReason
}

// ScheduledAt returns the log time of the current handoff.
func (x *Execution) ScheduledAt() time.Time { return x.scheduledAt }

// Owner returns who may move the execution now: the executor before the
// handoff (and always for a with_items parent), a worker after it, nobody
// once it has ended.
func (x *Execution) Owner() Owner {
	switch {
	case x.status.Terminal():
		return ""
	case x.parent:
		return OwnerExecutor
	case x.status == StatusScheduled || x.status == StatusRunning:
		return OwnerWorker
	default:
		return OwnerExecutor
	}
}

// ExecutionState is a plain copy of an execution's state, for read models.
type ExecutionState struct {
	ID             string          `json:"id"`
	Action         string          `json:"action"`
	ConcurrencyKey string          `json:"concurrency_key,omitempty"`
	Parent         string          `json:"parent,omitempty"`
	ItemIndex      int             `json:"item_index,omitempty"`
	Items          int             `json:"items,omitempty"`
	Concurrency    int             `json:"concurrency,omitempty"`
	Children       []string        `json:"children,omitempty"`           // a with_items parent's children, one per item, in item order
	ChildrenAsked  int             `json:"children_requested,omitempty"` // how many of them have been requested (the first ones)
	Status         Status          `json:"status"`
	Worker         string          `json:"worker,omitempty"`
	Attempt        int             `json:"attempt"`
	CancelAsked    bool            `json:"cancel_requested,omitempty"`
	Input          json.RawMessage `json:"input,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          string          `json:"error,omitempty"`
	Code           string          `json:"code,omitempty"` // of a rejection, failure or cancellation, when it has one
	RequestedAt    *time.Time      `json:"requested_at,omitempty"`
	SchedulingAt   *time.Time      `json:"scheduling_at,omitempty"`
	ScheduledAt    *time.Time      `json:"scheduled_at,omitempty"`
	RunningAt      *time.Time      `json:"running_at,omitempty"`
	EndedAt        *time.Time      `json:"ended_at,omitempty"`
	Version        int64           `json:"version"`
}

// State returns a copy of the execution's state.
func (x *Execution) State() ExecutionState {
	t := func(v time.Time) *time.Time {
		if v.IsZero() {
			return nil
		}
		return &v
	}
	return ExecutionState{
		ID: x.id, Action: x.action, ConcurrencyKey: x.key, Parent: x.parentID, ItemIndex: x.itemIndex, Items: x.items,
		Concurrency: x.concurrency, Children: x.Children(), ChildrenAsked: x.asked,
		Status: x.status, Worker: x.worker, Attempt: x.attempt, CancelAsked: x.cancelRequested,
		Input: x.input, Result: x.result, Error: x.errMsg, Code: x.code,
		RequestedAt: t(x.requestedAt), SchedulingAt: t(x.grantedAt), ScheduledAt: t(x.scheduledAt),
		RunningAt: t(x.runningAt), EndedAt: t(x.endedAt), Version: x.version,
	}
}

// ---- commands: each checks the rule and returns the event to append ----

// Request decides the opening event of the stream. The input, if any, must be
// a JSON object of at most MaxInputBytes. A with_items parent gives its items
// in WithItems (1..MaxItems valid JSON values, MaxItemsBytes together, each
// giving a child input within MaxInputBytes), with a window (Concurrency)
// of at most MaxConcurrentLimit; Items is set to their number.
// A child names its parent and its item index.
func (x *Execution) Request(r ExecutionRequested) (ExecutionRequested, error) {
	if err := x.Check(TypeExecutionRequested, OwnerExecutor, ""); err != nil {
		return r, err
	}
	if err := ValidateRef(r.Action); err != nil {
		return r, fmt.Errorf("%w: action: %w", ErrInvalidRequest, err)
	}
	if err := ValidateInput(r.Input); err != nil {
		return r, err
	}
	if err := r.validateTiming(); err != nil {
		return r, err
	}
	if r.Items < 0 || r.Concurrency < 0 || (r.Items == 0 && len(r.WithItems) == 0 && r.Concurrency != 0) {
		return r, fmt.Errorf("%w: items %d and concurrency %d", ErrInvalidRequest, r.Items, r.Concurrency)
	}
	if r.Concurrency > MaxConcurrentLimit {
		return r, fmt.Errorf("%w: concurrency %d is out of range 1..%d", ErrInvalidRequest, r.Concurrency, MaxConcurrentLimit)
	}
	if r.Items > 0 || len(r.WithItems) > 0 {
		if err := validateItems(r); err != nil {
			return r, err
		}
		r.Items = len(r.WithItems)
	}
	if r.Parent != "" && (r.Items > 0 || r.ItemIndex < 0 || r.ItemIndex >= MaxItems) {
		return r, fmt.Errorf("%w: child of %s with item index %d", ErrInvalidRequest, r.Parent, r.ItemIndex)
	}
	if r.Parent == "" && r.ItemIndex != 0 {
		return r, fmt.Errorf("%w: item index %d without a parent", ErrInvalidRequest, r.ItemIndex)
	}
	return r, nil
}

func validateItems(r ExecutionRequested) error {
	n := len(r.WithItems)
	switch {
	case n == 0:
		return fmt.Errorf("%w: a with_items request needs its items", ErrInvalidRequest)
	case r.Items != 0 && r.Items != n:
		return fmt.Errorf("%w: items says %d, %d items given", ErrInvalidRequest, r.Items, n)
	case n > MaxItems:
		return fmt.Errorf("%w: %d items, the limit is %d", ErrInvalidRequest, n, MaxItems)
	case r.Parent != "":
		return fmt.Errorf("%w: a with_items child cannot have items of its own", ErrInvalidRequest)
	}
	total := 0
	for i, it := range r.WithItems {
		total += len(it)
		if total > MaxItemsBytes {
			return fmt.Errorf("%w: items are more than %d bytes together", ErrInvalidRequest, MaxItemsBytes)
		}
		in, err := ChildInput(r.Input, it)
		if err != nil {
			return fmt.Errorf("item %d: %w", i, err)
		}
		if len(in) > MaxInputBytes {
			return fmt.Errorf("%w: item %d gives a child input of %d bytes, the limit is %d", ErrInvalidRequest, i, len(in), MaxInputBytes)
		}
	}
	return nil
}

// ValidateInput checks an execution input: absent, null, or a JSON object of
// at most MaxInputBytes.
func ValidateInput(in json.RawMessage) error {
	if len(in) > MaxInputBytes {
		return fmt.Errorf("%w: input is %d bytes, the limit is %d", ErrInvalidRequest, len(in), MaxInputBytes)
	}
	t := bytes.TrimSpace(in)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil
	}
	if t[0] != '{' || !json.Valid(t) {
		return fmt.Errorf("%w: input must be a JSON object", ErrInvalidRequest)
	}
	return nil
}

// Reject decides the rejection of a request that was never granted.
func (x *Execution) Reject(code, reason string) (ExecutionRejected, error) {
	return ExecutionRejected{Code: code, Reason: clipReason(reason)}, x.Check(TypeExecutionRejected, OwnerExecutor, "")
}

// Grant decides the slot grant in the queue of concurrency key key. The
// caller must have checked, with the action's Queue, that the execution is the
// head of that queue and a slot is free.
func (x *Execution) Grant(key string) (ExecutionScheduling, error) {
	return ExecutionScheduling{ConcurrencyKey: key}, x.Check(TypeExecutionScheduling, OwnerExecutor, "")
}

// Holds checks that the current handoff is the one a worker acts under:
// handed to worker, to its incarnation incarnation, as attempt attempt. A
// worker checks it before every write, so a run of an older handoff (taken
// back by an expiry or a lost verdict, and maybe handed again, even to the same
// worker id) never writes for the newer one. It returns nil or a *RuleError
// (RuleHandoff or RuleAttempt; RuleTerminal once the execution ended).
func (x *Execution) Holds(worker, incarnation string, attempt int) error {
	refuse := func(rule, detail string) error {
		return &RuleError{Rule: rule, Execution: x.id, Event: "handoff", State: x.status, Owner: OwnerWorker, Writer: worker, Detail: detail}
	}
	switch {
	case x.status.Terminal():
		return refuse(RuleTerminal, "the execution has ended")
	case x.status != StatusScheduled && x.status != StatusRunning:
		return refuse(RuleTransition, fmt.Sprintf("attempt %d was taken back from worker %q", attempt, worker))
	case x.worker != worker:
		return refuse(RuleHandoff, fmt.Sprintf("attempt %d is handed to worker %q", x.attempt, x.worker))
	case x.attempt != attempt || (incarnation != "" && x.incarnation != "" && x.incarnation != incarnation):
		return refuse(RuleAttempt, fmt.Sprintf("the current handoff is attempt %d to incarnation %s, not attempt %d to %s",
			x.attempt, x.incarnation, attempt, incarnation))
	}
	return nil
}

// Schedule decides the handoff to worker under policy p. It fails with
// ErrAttemptsExhausted when p.MaxAttempts handoffs have already happened.
func (x *Execution) Schedule(worker, incarnation string, p Policy) (ExecutionScheduled, error) {
	if err := x.Check(TypeExecutionScheduled, OwnerExecutor, ""); err != nil {
		return ExecutionScheduled{}, err
	}
	if worker == "" {
		return ExecutionScheduled{}, fmt.Errorf("%w: schedule to an unnamed worker", ErrInvalidRequest)
	}
	if limit := p.HandoffLimit(); limit > 0 && x.attempt >= limit {
		return ExecutionScheduled{}, fmt.Errorf("execution %s after %d attempts: %w", x.id, x.attempt, ErrAttemptsExhausted)
	}
	return ExecutionScheduled{
		Worker: worker, Incarnation: incarnation, Attempt: x.attempt + 1, Action: x.action, Runner: p.Runner, Input: x.input,
		TimeoutMillis: p.Timeout().Milliseconds(), ScheduledTimeoutMS: p.ScheduledTimeout().Milliseconds(),
		RunnerConfig: p.RunnerConfig, KeyField: p.ConcurrencyKey, Runs: runsOf(p), Traceparent: x.traceparent,
	}, nil
}

// Start decides that worker starts the execution handed to it.
func (x *Execution) Start(worker string) (ExecutionRunning, error) {
	return ExecutionRunning{Worker: worker, Attempt: x.attempt}, x.Check(TypeExecutionRunning, OwnerWorker, worker)
}

// ErrNoMoreChildren is returned when a with_items parent may not request the
// children asked for: beyond its items, or after it was asked to cancel.
var ErrNoMoreChildren = errors.New("no more children may be requested")

// RequestChildren decides that a running with_items parent requests its
// next count children (items ChildrenRequested().., in item order). The
// caller appends their execution.requested events in the same append.
func (x *Execution) RequestChildren(count int) (ExecutionChildrenRequested, error) {
	ev := ExecutionChildrenRequested{First: x.asked, Count: count}
	if err := x.Check(TypeExecutionChildrenRequested, OwnerExecutor, ""); err != nil {
		return ev, err
	}
	switch {
	case count < 1 || x.asked+count > x.items:
		return ev, fmt.Errorf("execution %s: items %d..%d of %d: %w", x.id, x.asked, x.asked+count-1, x.items, ErrNoMoreChildren)
	case x.cancelRequested:
		return ev, fmt.Errorf("execution %s was asked to cancel: %w", x.id, ErrNoMoreChildren)
	}
	return ev, nil
}

// StartParent decides that a with_items parent starts fanning out.
func (x *Execution) StartParent() (ExecutionRunning, error) {
	return ExecutionRunning{}, x.Check(TypeExecutionRunning, OwnerExecutor, "")
}

// Complete decides a successful end, by the owning worker (or the executor
// for a with_items parent).
func (x *Execution) Complete(owner Owner, writer string, result json.RawMessage) (ExecutionCompleted, error) {
	return ExecutionCompleted{Result: result}, x.Check(TypeExecutionCompleted, owner, writer)
}

// Fail decides a failed end by the current owner.
func (x *Execution) Fail(owner Owner, writer, message string, result json.RawMessage) (ExecutionFailed, error) {
	return ExecutionFailed{Error: clipReason(message), Result: result}, x.Check(TypeExecutionFailed, owner, writer)
}

// TimeOut decides that the owning worker stopped the run at its timeout.
func (x *Execution) TimeOut(worker string, timeout time.Duration) (ExecutionTimedOut, error) {
	return ExecutionTimedOut{TimeoutMillis: timeout.Milliseconds()}, x.Check(TypeExecutionTimedOut, OwnerWorker, worker)
}

// Cancel decides a cancellation by the current owner.
func (x *Execution) Cancel(owner Owner, writer, reason string) (ExecutionCancelled, error) {
	return ExecutionCancelled{Reason: clipReason(reason)}, x.Check(TypeExecutionCancelled, owner, writer)
}

// RequestCancel decides a client's cancellation request. Asking twice gives
// ErrCancelAlreadyAsked; asking after the end gives a RuleError (RuleTerminal).
func (x *Execution) RequestCancel(reason string) (ExecutionCancelRequested, error) {
	return x.RequestCancelAs(OwnerAPI, reason)
}

// RequestCancelAs decides a cancellation request by owner: the API for a
// client, the executor for the children of a cancelled with_items parent.
func (x *Execution) RequestCancelAs(owner Owner, reason string) (ExecutionCancelRequested, error) {
	if err := x.Check(TypeExecutionCancelRequested, owner, ""); err != nil {
		return ExecutionCancelRequested{}, err
	}
	if x.cancelRequested {
		return ExecutionCancelRequested{}, fmt.Errorf("execution %s: %w", x.id, ErrCancelAlreadyAsked)
	}
	return ExecutionCancelRequested{Reason: clipReason(reason)}, nil
}

// HandoffDeadline returns when the current handoff expires, judged by the
// log's time of the scheduled event.
func (x *Execution) HandoffDeadline() time.Time {
	return x.scheduledAt.Add(x.scheduledTimeout)
}

// ExpireHandoff decides that the worker did not start in time. now is the
// log's time (or the executor's clock) at the decision.
func (x *Execution) ExpireHandoff(now time.Time) (ExecutionHandoffExpired, error) {
	if err := x.Check(TypeExecutionHandoffExpired, OwnerExecutor, ""); err != nil {
		return ExecutionHandoffExpired{}, err
	}
	if now.Before(x.HandoffDeadline()) {
		return ExecutionHandoffExpired{}, fmt.Errorf("execution %s: deadline %s: %w", x.id, x.HandoffDeadline().Format(time.RFC3339Nano), ErrHandoffNotExpired)
	}
	return ExecutionHandoffExpired{Worker: x.worker, Attempt: x.attempt}, nil
}

// Abandon decides taking the execution back from a worker declared lost.
func (x *Execution) Abandon(reason string) (ExecutionAbandoned, error) {
	return ExecutionAbandoned{Worker: x.worker, Attempt: x.attempt, Reason: clipReason(reason)},
		x.Check(TypeExecutionAbandoned, OwnerExecutor, "")
}

// Validate checks an event against the handoff rule and the execution's
// state, including what its payload claims (worker, attempt): the audit's
// check of one stored event.
func (x *Execution) Validate(ev Event, owner Owner, writer string) error {
	if err := x.Check(ev.EventType(), owner, writer); err != nil {
		return err
	}
	bad := func(detail string) error {
		return &RuleError{Rule: RuleAttempt, Execution: x.id, Event: ev.EventType(), State: x.status, Owner: owner, Writer: writer, Detail: detail}
	}
	switch e := ev.(type) {
	case ExecutionScheduled:
		if e.Worker == "" || e.Attempt != x.attempt+1 {
			return bad(fmt.Sprintf("handoff names worker %q attempt %d, expected attempt %d", e.Worker, e.Attempt, x.attempt+1))
		}
	case ExecutionRunning:
		if !x.parent && (e.Worker != writer || e.Attempt != x.attempt) {
			return bad(fmt.Sprintf("running claims worker %q attempt %d, the handoff is attempt %d", e.Worker, e.Attempt, x.attempt))
		}
	case ExecutionHandoffExpired:
		if e.Worker != x.worker || e.Attempt != x.attempt {
			return bad(fmt.Sprintf("expiry names worker %q attempt %d, the handoff is %q attempt %d", e.Worker, e.Attempt, x.worker, x.attempt))
		}
	case ExecutionAbandoned:
		if e.Worker != x.worker || e.Attempt != x.attempt {
			return bad(fmt.Sprintf("abandon names worker %q attempt %d, the handoff is %q attempt %d", e.Worker, e.Attempt, x.worker, x.attempt))
		}
	case ExecutionRunFailed, ExecutionRetryScheduled, ExecutionRequeued:
		if detail := x.validateRetry(ev); detail != "" {
			return bad(detail)
		}
	case ExecutionChildrenRequested:
		if e.First != x.asked || e.Count < 1 || e.First+e.Count > x.items || x.cancelRequested {
			return bad(fmt.Sprintf("children %d..%d requested; %d of %d were requested before, cancel requested %v",
				e.First, e.First+e.Count-1, x.asked, x.items, x.cancelRequested))
		}
	}
	return nil
}

// Apply folds one event at stream version version, committed at time at.
// It never validates: replay trusts the log.
func (x *Execution) Apply(ev Event, version uint64, at time.Time) {
	x.version = int64(version)
	switch e := ev.(type) {
	case ExecutionRequested:
		x.status, x.requestedAt = StatusRequested, at
		x.action, x.input = e.Action, e.Input
		x.parentID, x.itemIndex = e.Parent, e.ItemIndex
		x.parent, x.items, x.concurrency, x.withItems = e.Items > 0, e.Items, e.Concurrency, e.WithItems
		x.priority, x.deferredUntil = e.Priority, e.Due(at)
	case ExecutionRejected:
		x.status, x.endedAt, x.errMsg, x.code = StatusRejected, at, e.Reason, e.Code
	case ExecutionScheduling:
		x.status, x.grantedAt, x.key = StatusScheduling, at, e.ConcurrencyKey
	case ExecutionScheduled:
		x.status, x.scheduledAt, x.worker, x.attempt = StatusScheduled, at, e.Worker, e.Attempt
		x.incarnation, x.runningAt, x.runs = e.Incarnation, time.Time{}, e.Runs
		x.scheduledTimeout = time.Duration(e.ScheduledTimeoutMS) * time.Millisecond
		if e.Traceparent != "" {
			x.traceparent = e.Traceparent
		}
	case ExecutionRunning:
		x.status, x.runningAt = StatusRunning, at
	case ExecutionCompleted:
		x.status, x.endedAt, x.result = StatusCompleted, at, e.Result
	case ExecutionFailed:
		x.status, x.endedAt, x.errMsg, x.result, x.code = StatusFailed, at, e.Error, e.Result, e.Code
	case ExecutionTimedOut:
		x.status, x.endedAt, x.result = StatusTimedOut, at, e.Result
		x.errMsg = fmt.Sprintf("timed out after %s", time.Duration(e.TimeoutMillis)*time.Millisecond)
	case ExecutionCancelled:
		x.status, x.endedAt, x.errMsg, x.code, x.result = StatusCancelled, at, e.Reason, CancelCode(e.Code), e.Result
	case ExecutionCancelRequested:
		if !x.cancelRequested {
			x.cancelReason = e.Reason
		}
		x.cancelRequested = true
	case ExecutionChildrenRequested:
		x.asked = e.First + e.Count
	case ExecutionHandoffExpired:
		x.status, x.runningAt, x.takenBack = StatusScheduling, time.Time{}, FailScheduledTimeout
	case ExecutionAbandoned:
		x.status, x.runningAt, x.takenBack = StatusScheduling, time.Time{}, FailWorkerLost
	case ExecutionRunFailed:
		x.status, x.runningAt, x.takenBack = StatusScheduling, time.Time{}, TakenBackRunFailed
		x.errMsg, x.code, x.result = e.Error, e.Code, e.Result
	case ExecutionRetryScheduled:
		x.status, x.deferredUntil = StatusRequested, at.Add(time.Duration(e.BackoffMillis)*time.Millisecond)
		if x.deferredUntil.IsZero() {
			x.deferredUntil = at.Add(time.Nanosecond) // (a zero log time: still marked as backing off)
		}
	case ExecutionRequeued:
		x.deferredUntil, x.takenBack = time.Time{}, ""
	}
}

// clipReason bounds a reason to MaxReasonLen bytes, cut at a character
// boundary so the result stays valid UTF-8.
func clipReason(s string) string { return clipUTF8(s, MaxReasonLen) }

// clipUTF8 returns s, or its longest prefix of at most n bytes that ends at
// a character boundary followed by "…".
func clipUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
