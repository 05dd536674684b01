package domain

import (
	"errors"
	"fmt"
)

// Status is an execution's state. The values are the API's status strings.
type Status string

// Execution states. StatusNew is the state of a stream with no events.
const (
	StatusNew        Status = ""
	StatusRequested  Status = "requested"
	StatusScheduling Status = "scheduling"
	StatusScheduled  Status = "scheduled"
	StatusRunning    Status = "running"
	StatusCompleted  Status = "completed"
	StatusFailed     Status = "failed"
	StatusTimedOut   Status = "timed_out"
	StatusCancelled  Status = "cancelled"
	StatusRejected   Status = "rejected"
)

// AllStatuses lists every state, StatusNew first.
var AllStatuses = []Status{StatusNew, StatusRequested, StatusScheduling, StatusScheduled, StatusRunning,
	StatusCompleted, StatusFailed, StatusTimedOut, StatusCancelled, StatusRejected}

// Terminal reports whether s is an end state.
func (s Status) Terminal() bool {
	switch s {
	case StatusCompleted, StatusFailed, StatusTimedOut, StatusCancelled, StatusRejected:
		return true
	}
	return false
}

// Valid reports whether s is a known state other than StatusNew.
func (s Status) Valid() bool {
	for _, x := range AllStatuses[1:] {
		if s == x {
			return true
		}
	}
	return false
}

// Rule names, carried by RuleError so a refusal says which rule it broke.
const (
	RuleOwner      = "owner"      // the event type may not be written by this owner in this state
	RuleHandoff    = "handoff"    // a worker wrote for an execution handed to another worker
	RuleTransition = "transition" // the event does not follow from the current state
	RuleTerminal   = "terminal"   // the execution has already ended
	RuleUnknown    = "event-type" // not an execution event
	RuleAttempt    = "attempt"    // the event names another attempt than the current one
)

// Sentinels matched with errors.Is on a RuleError.
var (
	ErrRuleViolation     = errors.New("handoff rule violated")
	ErrWrongOwner        = errors.New("wrong owner")
	ErrNotHandoffWorker  = errors.New("worker is not the one named in the handoff")
	ErrIllegalTransition = errors.New("illegal transition")
	ErrAlreadyTerminal   = errors.New("execution already ended")
)

// RuleError is the refusal of an event by the handoff rule. It matches
// ErrRuleViolation and the sentinel of the rule it names.
type RuleError struct {
	Rule      string
	Execution string
	Event     string
	State     Status
	Owner     Owner
	Writer    string
	Detail    string
}

func (e *RuleError) Error() string {
	who := string(e.Owner)
	if e.Writer != "" {
		who += " " + e.Writer
	}
	state := string(e.State)
	if state == "" {
		state = "new"
	}
	return fmt.Sprintf("handoff rule %q: %s by %s refused for execution %s in state %s: %s",
		e.Rule, e.Event, who, e.Execution, state, e.Detail)
}

// Unwrap returns ErrRuleViolation and the rule's own sentinel.
func (e *RuleError) Unwrap() []error {
	var specific error
	switch e.Rule {
	case RuleOwner:
		specific = ErrWrongOwner
	case RuleHandoff:
		specific = ErrNotHandoffWorker
	case RuleTerminal:
		specific = ErrAlreadyTerminal
	default:
		specific = ErrIllegalTransition
	}
	return []error{ErrRuleViolation, specific}
}

// Guard narrows a rule row to one kind of execution.
type Guard string

// Guards of the handoff rule's rows.
const (
	GuardAny    Guard = ""       // any execution
	GuardPlain  Guard = "plain"  // an execution that runs on a worker (not a with_items parent)
	GuardParent Guard = "parent" // a with_items parent, whose children the executor tracks
)

// RuleRow is one row of the handoff rule: the event Event may be written by
// Owner while the execution is in one of the states From (and Guard holds),
// and it leads to To (To == "" keeps the state). A worker row also requires
// the writer to be the worker named in the current handoff.
type RuleRow struct {
	Event string
	From  []Status
	Owner Owner
	To    Status
	Guard Guard
}

var (
	preHandoff  = []Status{StatusRequested, StatusScheduling}
	postHandoff = []Status{StatusScheduled, StatusRunning}
	nonTerminal = []Status{StatusRequested, StatusScheduling, StatusScheduled, StatusRunning}
)

func states(s ...Status) []Status { return s }

// handoffRule is the handoff rule of DESIGN.md as one flat table: every way
// an execution's stream may grow. Rows of one event are tried in order.
// docs/handoff-rule.md is rendered from it (TestRuleTableInDocs).
var handoffRule = []RuleRow{
	{TypeExecutionRequested, states(StatusNew), OwnerExecutor, StatusRequested, GuardAny},
	{TypeExecutionRejected, states(StatusRequested), OwnerExecutor, StatusRejected, GuardAny},
	{TypeExecutionScheduling, states(StatusRequested), OwnerExecutor, StatusScheduling, GuardPlain},
	{TypeExecutionScheduled, states(StatusScheduling), OwnerExecutor, StatusScheduled, GuardPlain},
	{TypeExecutionRunning, states(StatusScheduled), OwnerWorker, StatusRunning, GuardPlain},
	{TypeExecutionRunning, states(StatusRequested), OwnerExecutor, StatusRunning, GuardParent},
	{TypeExecutionCompleted, states(StatusRunning), OwnerWorker, StatusCompleted, GuardPlain},
	{TypeExecutionCompleted, states(StatusRunning), OwnerExecutor, StatusCompleted, GuardParent},
	{TypeExecutionFailed, states(StatusRunning), OwnerWorker, StatusFailed, GuardPlain},
	{TypeExecutionFailed, states(StatusScheduling), OwnerExecutor, StatusFailed, GuardPlain},
	{TypeExecutionFailed, states(StatusRequested, StatusRunning), OwnerExecutor, StatusFailed, GuardParent},
	{TypeExecutionTimedOut, states(StatusRunning), OwnerWorker, StatusTimedOut, GuardPlain},
	{TypeExecutionCancelled, preHandoff, OwnerExecutor, StatusCancelled, GuardAny},
	{TypeExecutionCancelled, postHandoff, OwnerWorker, StatusCancelled, GuardPlain},
	{TypeExecutionCancelled, states(StatusRunning), OwnerExecutor, StatusCancelled, GuardParent},
	{TypeExecutionCancelRequested, nonTerminal, OwnerAPI, "", GuardAny},
	{TypeExecutionCancelRequested, nonTerminal, OwnerExecutor, "", GuardAny}, // the children of a cancelled with_items parent
	{TypeExecutionHandoffExpired, states(StatusScheduled), OwnerExecutor, StatusScheduling, GuardPlain},
	{TypeExecutionAbandoned, postHandoff, OwnerExecutor, StatusScheduling, GuardPlain},
	{TypeExecutionChildrenRequested, states(StatusRunning), OwnerExecutor, "", GuardParent},
	{TypeExecutionRunFailed, states(StatusRunning), OwnerWorker, StatusScheduling, GuardPlain},
	{TypeExecutionRetryScheduled, states(StatusScheduling), OwnerExecutor, StatusRequested, GuardPlain},
	{TypeExecutionRequeued, states(StatusRequested), OwnerExecutor, "", GuardPlain},
}

// HandoffRule returns a copy of the handoff rule's rows, in order.
func HandoffRule() []RuleRow {
	out := make([]RuleRow, len(handoffRule))
	for i, r := range handoffRule {
		r.From = append([]Status(nil), r.From...)
		out[i] = r
	}
	return out
}

// executionRules indexes handoffRule by event type, keeping the rows' order.
var executionRules = func() map[string][]RuleRow {
	m := make(map[string][]RuleRow)
	for _, r := range handoffRule {
		m[r.Event] = append(m[r.Event], r)
	}
	return m
}()

// applies reports whether the row's guard admits this execution.
func (r *RuleRow) applies(parent bool) bool {
	switch r.Guard {
	case GuardPlain:
		return !parent
	case GuardParent:
		return parent
	}
	return true
}

// executionTypes are the catalogue's event types of execution streams.
var executionTypes = func() []string {
	cat := NewCatalogue()
	var out []string
	for _, t := range cat.Types() {
		if spec, _ := cat.Spec(t); spec.Stream == StreamExecution {
			out = append(out, t)
		}
	}
	return out
}()

// ExecutionEventTypes lists the event types of an execution stream, as the
// catalogue registers them (independently of the handoff rule's rows).
func ExecutionEventTypes() []string { return append([]string(nil), executionTypes...) }

// Check applies the handoff rule: may owner (and, for a worker, writer) write
// an event of type typ to this execution now? It returns nil or a *RuleError.
// The same check refuses commands in the services and finds violations in the audit.
func (x *Execution) Check(typ string, owner Owner, writer string) error {
	_, err := x.check(typ, owner, writer)
	return err
}

func (x *Execution) check(typ string, owner Owner, writer string) (Status, error) {
	refuse := func(rule, detail string) (Status, error) {
		return "", &RuleError{Rule: rule, Execution: x.id, Event: typ, State: x.status, Owner: owner, Writer: writer, Detail: detail}
	}
	rows, ok := executionRules[typ]
	if !ok {
		return refuse(RuleUnknown, "not an execution event")
	}
	if x.status.Terminal() {
		return refuse(RuleTerminal, "no event follows a terminal one")
	}
	stateMatches := false
	for i := range rows {
		r := &rows[i]
		if !r.applies(x.parent) || !containsStatus(r.From, x.status) {
			continue
		}
		stateMatches = true
		if r.Owner != owner {
			continue
		}
		if owner == OwnerWorker && writer != x.worker {
			return refuse(RuleHandoff, fmt.Sprintf("attempt %d was handed to worker %q", x.attempt, x.worker))
		}
		to := r.To
		if to == "" {
			to = x.status
		}
		return to, nil
	}
	switch {
	case stateMatches: // a row for this state, none for this owner
		return refuse(RuleOwner, fmt.Sprintf("in this state only %s may write it", x.ownersFor(rows)))
	default:
		return refuse(RuleTransition, "it does not follow from this state")
	}
}

func (x *Execution) ownersFor(rows []RuleRow) string {
	s := ""
	for i := range rows {
		r := &rows[i]
		if !r.applies(x.parent) || !containsStatus(r.From, x.status) {
			continue
		}
		if s != "" {
			s += " or "
		}
		s += string(r.Owner)
		if r.Owner == OwnerWorker {
			s += fmt.Sprintf(" %q", x.worker)
		}
	}
	return s
}

func containsStatus(list []Status, s Status) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
