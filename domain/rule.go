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

// transition is one row of the handoff rule: from which states, by which
// owner, an event may be written, and the state it leads to ("" keeps the state).
type transition struct {
	from  []Status
	owner Owner
	to    Status
}

// ruleRow is a transition that may apply only to a with_items parent
// (parentOnly) or only to a plain execution (plainOnly).
type ruleRow struct {
	transition
	parentOnly, plainOnly bool
}

var (
	preHandoff  = []Status{StatusRequested, StatusScheduling}
	postHandoff = []Status{StatusScheduled, StatusRunning}
	nonTerminal = []Status{StatusRequested, StatusScheduling, StatusScheduled, StatusRunning}
)

// executionRules is the handoff rule of DESIGN.md as data. For every event type
// it lists who may write it from which state. Worker rows also require the
// writer to be the worker named in the current handoff.
var executionRules = map[string][]ruleRow{
	TypeExecutionRequested:  {{transition: transition{[]Status{StatusNew}, OwnerExecutor, StatusRequested}}},
	TypeExecutionRejected:   {{transition: transition{[]Status{StatusRequested}, OwnerExecutor, StatusRejected}}},
	TypeExecutionScheduling: {{transition: transition{[]Status{StatusRequested}, OwnerExecutor, StatusScheduling}, plainOnly: true}},
	TypeExecutionScheduled:  {{transition: transition{[]Status{StatusScheduling}, OwnerExecutor, StatusScheduled}, plainOnly: true}},
	TypeExecutionRunning: {
		{transition: transition{[]Status{StatusScheduled}, OwnerWorker, StatusRunning}, plainOnly: true},
		{transition: transition{[]Status{StatusRequested}, OwnerExecutor, StatusRunning}, parentOnly: true},
	},
	TypeExecutionCompleted: {
		{transition: transition{[]Status{StatusRunning}, OwnerWorker, StatusCompleted}, plainOnly: true},
		{transition: transition{[]Status{StatusRunning}, OwnerExecutor, StatusCompleted}, parentOnly: true},
	},
	TypeExecutionFailed: {
		{transition: transition{[]Status{StatusRunning}, OwnerWorker, StatusFailed}, plainOnly: true},
		{transition: transition{[]Status{StatusScheduling}, OwnerExecutor, StatusFailed}, plainOnly: true},
		{transition: transition{[]Status{StatusRequested, StatusRunning}, OwnerExecutor, StatusFailed}, parentOnly: true},
	},
	TypeExecutionTimedOut: {{transition: transition{[]Status{StatusRunning}, OwnerWorker, StatusTimedOut}, plainOnly: true}},
	TypeExecutionCancelled: {
		{transition: transition{preHandoff, OwnerExecutor, StatusCancelled}},
		{transition: transition{postHandoff, OwnerWorker, StatusCancelled}, plainOnly: true},
		{transition: transition{[]Status{StatusRunning}, OwnerExecutor, StatusCancelled}, parentOnly: true},
	},
	TypeExecutionCancelRequested: {
		{transition: transition{nonTerminal, OwnerAPI, ""}},
		{transition: transition{nonTerminal, OwnerExecutor, ""}}, // the children of a cancelled with_items parent
	},
	TypeExecutionHandoffExpired:    {{transition: transition{[]Status{StatusScheduled}, OwnerExecutor, StatusScheduling}, plainOnly: true}},
	TypeExecutionAbandoned:         {{transition: transition{postHandoff, OwnerExecutor, StatusScheduling}, plainOnly: true}},
	TypeExecutionChildrenRequested: {{transition: transition{[]Status{StatusRunning}, OwnerExecutor, ""}, parentOnly: true}},
}

// ExecutionEventTypes lists the event types of an execution stream.
func ExecutionEventTypes() []string {
	out := make([]string, 0, len(executionRules))
	for _, t := range Catalogue.Types() {
		if _, ok := executionRules[t]; ok {
			out = append(out, t)
		}
	}
	return out
}

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
	for _, r := range rows {
		if (r.parentOnly && !x.parent) || (r.plainOnly && x.parent) {
			continue
		}
		if !containsStatus(r.from, x.status) {
			continue
		}
		stateMatches = true
		if r.owner != owner {
			continue
		}
		if owner == OwnerWorker && writer != x.worker {
			return refuse(RuleHandoff, fmt.Sprintf("attempt %d was handed to worker %q", x.attempt, x.worker))
		}
		to := r.to
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

func (x *Execution) ownersFor(rows []ruleRow) string {
	s := ""
	for _, r := range rows {
		if (r.parentOnly && !x.parent) || (r.plainOnly && x.parent) || !containsStatus(r.from, x.status) {
			continue
		}
		if s != "" {
			s += " or "
		}
		s += string(r.owner)
		if r.owner == OwnerWorker {
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
