package domain

import (
	"encoding/json"
	"fmt"
	"time"
)

// Stable event names. They are stored in the log: never rename one.
const (
	TypeActionDefined       = "action.defined"
	TypeActionPolicyChanged = "action.policy_changed"
	TypeActionPaused        = "action.paused"
	TypeActionResumed       = "action.resumed"

	TypeExecutionRequested         = "execution.requested"
	TypeExecutionRejected          = "execution.rejected"
	TypeExecutionScheduling        = "execution.scheduling"
	TypeExecutionScheduled         = "execution.scheduled"
	TypeExecutionRunning           = "execution.running"
	TypeExecutionCompleted         = "execution.completed"
	TypeExecutionFailed            = "execution.failed"
	TypeExecutionTimedOut          = "execution.timed_out"
	TypeExecutionCancelled         = "execution.cancelled"
	TypeExecutionCancelRequested   = "execution.cancel_requested"
	TypeExecutionHandoffExpired    = "execution.handoff_expired"
	TypeExecutionAbandoned         = "execution.abandoned"
	TypeExecutionChildrenRequested = "execution.children_requested"

	TypeQueueGranted       = "queue.granted"
	TypeQueueActionChanged = "queue.action_changed"

	TypeWorkerRegistered = "worker.registered"
	TypeWorkerHeartbeat  = "worker.heartbeat"
	TypeWorkerDraining   = "worker.draining"
	TypeWorkerStopped    = "worker.stopped"
	TypeWorkerLost       = "worker.lost"
)

// ---- action-<ref> ----

// ActionDefined creates an action with its policy.
type ActionDefined struct {
	Policy Policy `json:"policy"`
}

// ActionPolicyChanged replaces an action's policy from the next grant on.
type ActionPolicyChanged struct {
	Policy Policy `json:"policy"`
}

// ActionPaused stops grants for the action; requests still queue.
type ActionPaused struct {
	Reason string `json:"reason,omitempty"`
}

// ActionResumed lets grants start again.
type ActionResumed struct{}

func (ActionDefined) EventType() string       { return TypeActionDefined }
func (ActionPolicyChanged) EventType() string { return TypeActionPolicyChanged }
func (ActionPaused) EventType() string        { return TypeActionPaused }
func (ActionResumed) EventType() string       { return TypeActionResumed }

// ---- execution-<id> ----

// ExecutionRequested opens an execution's stream. Its position in the log is
// the execution's place in its queue.
//
// A with_items parent carries its items (WithItems, Items = len(WithItems))
// and its window (Concurrency, 0: no window of its own); it takes no slot and
// never reaches a worker: the executor requests one child per item, in item
// order, each a plain execution of the same action with Parent and ItemIndex set.
type ExecutionRequested struct {
	Action string          `json:"action"`
	Input  json.RawMessage `json:"input,omitempty"`
	// ConcurrencyKey is not used: the queue fold derives the key from Input
	// with the policy in force at the request's position (Policy.KeyOf). It
	// stays readable in old events.
	ConcurrencyKey string            `json:"concurrency_key,omitempty"`
	Parent         string            `json:"parent,omitempty"`          // the with_items parent, for a child
	ItemIndex      int               `json:"item_index,omitempty"`      // the child's item index in its parent
	Items          int               `json:"items,omitempty"`           // for a with_items parent: how many children
	Concurrency    int               `json:"concurrency,omitempty"`     // for a with_items parent: its window
	WithItems      []json.RawMessage `json:"with_items,omitempty"`      // for a with_items parent: the items, in order
	IdempotencyKey string            `json:"idempotency_key,omitempty"` // the client's key, if it gave one
	RequestHash    string            `json:"request_hash,omitempty"`    // with an idempotency key: hash of the request body, to detect the key reused
	// Priority is 1..4 (1 first); 0: DefaultPriority. RunAt or DelayMillis
	// (from this event's log time) make it wait in no FIFO until then
	// (see Due); see priority.go.
	Priority    int    `json:"priority,omitempty"`
	RunAt       string `json:"run_at,omitempty"` // RFC 3339 (a string: the event's encoding stays exact and fast)
	DelayMillis int64  `json:"delay_ms,omitempty"`
	// Schedule and Tick: the request of a schedule's tick (FormatTick); its
	// id is ScheduleTickID(Schedule, Tick). See schedule.go.
	Schedule string `json:"schedule,omitempty"`
	Tick     string `json:"tick,omitempty"`
}

// ExecutionRejected ends an execution that was never granted.
type ExecutionRejected struct {
	Reason string `json:"reason"`
	Code   string `json:"code,omitempty"` // machine-readable: unknown_action, invalid_input, queue_full, rate_limited
}

// ExecutionScheduling records the slot grant: the execution was the head of its
// queue and a slot was free.
type ExecutionScheduling struct {
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
}

// ExecutionScheduled is the handoff: from here the named worker owns the
// execution. It carries everything the worker needs to run it.
type ExecutionScheduled struct {
	Worker             string          `json:"worker"`
	Incarnation        string          `json:"incarnation,omitempty"` // the worker process the handoff is for
	Attempt            int             `json:"attempt"`               // 1 for the first handoff
	Action             string          `json:"action"`
	Runner             string          `json:"runner"`
	Input              json.RawMessage `json:"input,omitempty"`
	TimeoutMillis      int64           `json:"timeout_ms"`           // the action's run timeout
	ScheduledTimeoutMS int64           `json:"scheduled_timeout_ms"` // the worker must start within this
	// RunnerConfig is the runner_config of the action's policy in force at
	// the grant, for the runner to read next to the input.
	RunnerConfig json.RawMessage `json:"runner_config,omitempty"`
	// KeyField is the action's concurrency_key in force at the grant: the
	// name of the input field that picks the queue, which is the action's
	// and not the runner's to read (built-in runners ignore it).
	KeyField string `json:"key_field,omitempty"`
	// ResourceKeyFields are the key_fields of the keyed resources the
	// action needs, at the grant, one per line: input fields that are the
	// action's too (built-in runners ignore them as they do KeyField). One
	// string, not a list, so the event keeps its fast encoding.
	ResourceKeyFields string `json:"resource_key_fields,omitempty"`
	// Runs is how many runs the action's retry policy allows in all at the
	// grant (its max_attempts; omitted: 1, no retry): a failed run whose
	// attempt is below it ends in execution.run_failed, to be run again.
	Runs int `json:"runs,omitempty"`
	// Traceparent is the W3C trace context of the request (its
	// metadata's), for the worker to start the run's span in; omitted
	// when the request carried none.
	Traceparent string `json:"traceparent,omitempty"`
}

// ExecutionRunning says the named worker started the execution.
type ExecutionRunning struct {
	Worker  string `json:"worker"`
	Attempt int    `json:"attempt"`
}

// ExecutionCompleted ends an execution successfully.
type ExecutionCompleted struct {
	Result json.RawMessage `json:"result,omitempty"`
}

// ExecutionFailed ends an execution with an error. Code, when set, says why
// in a machine-readable way (FailScheduledTimeout, FailWorkerLost, FailDrain,
// FailItems); a failure of the action itself has none.
type ExecutionFailed struct {
	Error  string          `json:"error"`
	Code   string          `json:"code,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// ExecutionTimedOut ends an execution that ran past its action's timeout.
// Result is what the runner had when it was stopped, if anything.
type ExecutionTimedOut struct {
	TimeoutMillis int64           `json:"timeout_ms"`
	Result        json.RawMessage `json:"result,omitempty"`
}

// ExecutionCancelled ends an execution on request, on queue timeout, or
// because its with_items parent was cancelled (Code says which). Result is
// what the runner had when it was stopped, if anything.
type ExecutionCancelled struct {
	Reason string          `json:"reason,omitempty"`
	Code   string          `json:"code,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// Codes of ExecutionFailed and ExecutionCancelled.
const (
	FailScheduledTimeout = "scheduled_timeout" // no worker started it within scheduled_timeout, max_attempts times
	FailWorkerLost       = "worker_lost"       // its worker was lost (or stopped) holding it, max_attempts times
	FailDrain            = "drain"             // its worker drained and it did not finish within the grace period (builds before issue 16; such a run is now handed back and runs again)
	FailItems            = "items_failed"      // a with_items parent: some children did not complete

	CancelRequested       = "cancel_requested" // its cancellation was requested (execution.cancel_requested: a client's, or on_limit cancel_in_progress)
	CancelQueueTimeout    = "queue_timeout"    // it waited longer than the queue timeout
	CancelParentCancelled = "parent_cancelled" // its with_items parent was cancelled

	// CancelRequestedBefore is CancelRequested as logs written before issue
	// 35 hold it; folds read it as CancelRequested (CancelCode).
	CancelRequestedBefore = "requested"
)

// CancelCode is the code an execution.cancelled event's code stands for:
// CancelRequestedBefore is read as CancelRequested, any other as it is.
func CancelCode(code string) string {
	if code == CancelRequestedBefore {
		return CancelRequested
	}
	return code
}

// ExecutionCancelRequested records a cancellation request (a client's, or
// the executor's for the children of a cancelled with_items parent); it
// changes no state.
type ExecutionCancelRequested struct {
	Reason string `json:"reason,omitempty"`
}

// ExecutionHandoffExpired takes an execution back from a worker that did not
// start it within the scheduled timeout.
type ExecutionHandoffExpired struct {
	Worker  string `json:"worker"`
	Attempt int    `json:"attempt"`
}

// ExecutionAbandoned takes an execution back from a worker declared lost.
type ExecutionAbandoned struct {
	Worker  string `json:"worker"`
	Attempt int    `json:"attempt"`
	Reason  string `json:"reason,omitempty"`
}

// ExecutionChildrenRequested is written to a with_items parent's stream in
// the same atomic append as its children's execution.requested events (items
// First..First+Count-1). The parent's stream version thus fences its fan-out:
// requesting children, a cancellation request and the parent's end are
// decided in one order, so no child is announced after the parent was asked
// to cancel or has ended, and two executors never request the same items.
// On a store without atomic multi-stream appends the children follow it one
// stream at a time, in item order (the executor completes them from the log
// if the writer stopped in between); the parent ends only after all of them.
type ExecutionChildrenRequested struct {
	First int `json:"first"`
	Count int `json:"count"`
}

func (ExecutionChildrenRequested) EventType() string { return TypeExecutionChildrenRequested }
func (ExecutionRequested) EventType() string         { return TypeExecutionRequested }
func (ExecutionRejected) EventType() string          { return TypeExecutionRejected }
func (ExecutionScheduling) EventType() string        { return TypeExecutionScheduling }
func (ExecutionScheduled) EventType() string         { return TypeExecutionScheduled }
func (ExecutionRunning) EventType() string           { return TypeExecutionRunning }
func (ExecutionCompleted) EventType() string         { return TypeExecutionCompleted }
func (ExecutionFailed) EventType() string            { return TypeExecutionFailed }
func (ExecutionTimedOut) EventType() string          { return TypeExecutionTimedOut }
func (ExecutionCancelled) EventType() string         { return TypeExecutionCancelled }
func (ExecutionCancelRequested) EventType() string   { return TypeExecutionCancelRequested }
func (ExecutionHandoffExpired) EventType() string    { return TypeExecutionHandoffExpired }
func (ExecutionAbandoned) EventType() string         { return TypeExecutionAbandoned }

// ---- queue-<ref> ----

// QueueGranted is written to an action's queue stream, in the same atomic
// append as the execution's ExecutionScheduling, with the queue stream's
// expected version: that version fences grants, so two executors can never
// both grant from the same queue state. On a store without atomic
// multi-stream appends it is written alone, first, and the execution's
// events follow (the executor completes them from the log if the writer
// stopped in between); a grant of an execution that ended before it, which
// that store cannot fence, is void.
type QueueGranted struct {
	Execution      string `json:"execution"`
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	// Seen is the log position the grant was decided on (every event
	// before it folded; 0: not recorded, as in older logs). A request of a
	// higher priority committed at or after it was not known to the
	// decision: the grant may pass it (priority.go).
	Seen uint64 `json:"seen,omitempty"`
}

// QueueActionChanged is appended to an action's queue stream in the same
// atomic append as every action.* event (definition, policy change, pause,
// resume). It moves the queue stream's version, the fence of grants: a grant
// decided on the old policy or pause state fails and is decided again, so a
// change applies exactly from the next grant in the log.
//
// On a store without atomic multi-stream appends it is written first,
// alone, and announces the change: Event holds the action event about to be
// appended at ActionVersion (a whole Envelope, id and writer included). The
// executor grants nothing from the queue while an announced change is not in
// the action stream, and appends Event itself if its writer stopped, which
// is an idempotent replay if the writer's own append lands too.
type QueueActionChanged struct {
	ActionVersion uint64          `json:"action_version"`  // version of the action event it accompanies
	Change        string          `json:"change"`          // that event's type
	Event         json.RawMessage `json:"event,omitempty"` // the announced action event (an Envelope), when written before it
}

func (QueueGranted) EventType() string       { return TypeQueueGranted }
func (QueueActionChanged) EventType() string { return TypeQueueActionChanged }

// ---- worker-<id> ----

// WorkerRegistered starts a worker incarnation.
type WorkerRegistered struct {
	Slots       int      `json:"slots"`
	Runners     []string `json:"runners,omitempty"`
	Host        string   `json:"host,omitempty"`
	PID         int      `json:"pid,omitempty"`
	Incarnation string   `json:"incarnation"` // new for every start of the worker
}

// WorkerHeartbeat is a worker's sign of life in the log: it pays what the
// incarnation owes (Worker.Owe); the log's time of the event counts. A worker
// writes one only while it owes one (it holds executions, or was handed one
// since it last wrote), at most a few times per lease: an idle worker writes
// none.
type WorkerHeartbeat struct {
	Incarnation string `json:"incarnation"`
	InFlight    int    `json:"in_flight"`
}

// WorkerDraining says the worker takes nothing new.
type WorkerDraining struct {
	Incarnation string `json:"incarnation"`
}

// WorkerStopped ends a worker incarnation cleanly.
type WorkerStopped struct {
	Incarnation string `json:"incarnation"`
}

// WorkerLost is the executor's verdict that a worker incarnation is gone.
type WorkerLost struct {
	Incarnation string    `json:"incarnation"`
	Reason      string    `json:"reason"`
	LastSeen    time.Time `json:"last_seen"`
	// OwedSince and LeaseMillis, for a verdict judged by the lease: the
	// log time from which the incarnation owed a sign of life, and the
	// lease it was judged by. A forced verdict (the previous run's
	// in-process workers) records neither.
	OwedSince   time.Time `json:"owed_since,omitzero"`
	LeaseMillis int64     `json:"lease_ms,omitempty"`
}

func (WorkerRegistered) EventType() string { return TypeWorkerRegistered }
func (WorkerHeartbeat) EventType() string  { return TypeWorkerHeartbeat }
func (WorkerDraining) EventType() string   { return TypeWorkerDraining }
func (WorkerStopped) EventType() string    { return TypeWorkerStopped }
func (WorkerLost) EventType() string       { return TypeWorkerLost }

// Stream categories.
const (
	StreamAction    = "action"
	StreamExecution = "execution"
	StreamQueue     = "queue"
	StreamWorker    = "worker"
)

// ActionStream, ExecutionStream, QueueStream and WorkerStream name the streams.
func ActionStream(ref string) string   { return StreamAction + "-" + ref }
func ExecutionStream(id string) string { return StreamExecution + "-" + id }
func QueueStream(ref string) string    { return StreamQueue + "-" + ref }
func WorkerStream(id string) string    { return StreamWorker + "-" + id }

// SplitStream returns a stream's category and id ("execution", "6f1c…").
func SplitStream(stream string) (category, id string) {
	for _, c := range [...]string{StreamExecution, StreamQueue, StreamAction, StreamWorker, StreamSchedule, StreamCheckpoint, StreamResource} {
		if len(stream) > len(c)+1 && stream[:len(c)] == c && stream[len(c)] == '-' {
			return c, stream[len(c)+1:]
		}
	}
	return "", stream
}

// NewCatalogue returns turnstile's event catalogue, sealed: every event
// type of this package, at its schema version, with its owners and stream.
func NewCatalogue() *Registry {
	r := NewRegistry()
	ex, wk, api := OwnerExecutor, OwnerWorker, OwnerAPI
	for _, reg := range []struct {
		ev     Event
		stream string
		owners []Owner
	}{
		{ActionDefined{}, StreamAction, []Owner{api}},
		{ActionPolicyChanged{}, StreamAction, []Owner{api}},
		{ActionPaused{}, StreamAction, []Owner{api}},
		{ActionResumed{}, StreamAction, []Owner{api}},
		{ExecutionRequested{}, StreamExecution, []Owner{ex}},
		{ExecutionRejected{}, StreamExecution, []Owner{ex}},
		{ExecutionScheduling{}, StreamExecution, []Owner{ex}},
		{ExecutionScheduled{}, StreamExecution, []Owner{ex}},
		{ExecutionRunning{}, StreamExecution, []Owner{wk, ex}}, // ex: a with_items parent starts its fan-out
		{ExecutionCompleted{}, StreamExecution, []Owner{wk, ex}},
		{ExecutionFailed{}, StreamExecution, []Owner{wk, ex}},
		{ExecutionTimedOut{}, StreamExecution, []Owner{wk}},
		{ExecutionCancelled{}, StreamExecution, []Owner{ex, wk}},
		{ExecutionCancelRequested{}, StreamExecution, []Owner{api, ex}}, // ex: the children of a cancelled parent
		{ExecutionHandoffExpired{}, StreamExecution, []Owner{ex}},
		{ExecutionAbandoned{}, StreamExecution, []Owner{ex}},
		{ExecutionChildrenRequested{}, StreamExecution, []Owner{ex}},
		{ExecutionRunFailed{}, StreamExecution, []Owner{wk}},
		{ExecutionRetryScheduled{}, StreamExecution, []Owner{ex}},
		{ExecutionRequeued{}, StreamExecution, []Owner{ex}},
		{QueueGranted{}, StreamQueue, []Owner{ex}},
		{QueueActionChanged{}, StreamQueue, []Owner{api}},
		{WorkerRegistered{}, StreamWorker, []Owner{wk}},
		{WorkerHeartbeat{}, StreamWorker, []Owner{wk}},
		{WorkerDraining{}, StreamWorker, []Owner{wk}},
		{WorkerStopped{}, StreamWorker, []Owner{wk}},
		{WorkerLost{}, StreamWorker, []Owner{ex}},
		{ScheduleDefined{}, StreamSchedule, []Owner{api}},
		{SchedulePaused{}, StreamSchedule, []Owner{api}},
		{ScheduleResumed{}, StreamSchedule, []Owner{api}},
		{ScheduleDeleted{}, StreamSchedule, []Owner{api}},
		{CheckpointPart{}, StreamCheckpoint, []Owner{ex}},
		{CheckpointWritten{}, StreamCheckpoint, []Owner{ex}},
		{ResourceDefined{}, StreamResource, []Owner{api}},
		{ResourceDeleted{}, StreamResource, []Owner{api}},
		{ResourceGranted{}, StreamResource, []Owner{ex}},
	} {
		if err := r.Register(reg.ev, 1, reg.stream, reg.owners...); err != nil {
			panic(fmt.Sprintf("domain catalogue: %v", err))
		}
	}
	r.Seal()
	return r
}
