package domain_test

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/turnstile/turnstile/domain"
)

// actor is one party trying to write an event.
type actor struct {
	owner  domain.Owner
	writer string
}

func (a actor) String() string {
	if a.writer == "" {
		return string(a.owner)
	}
	return string(a.owner) + "/" + a.writer
}

// ruleActors: the api, the executor, the worker named in the handoff ("w1")
// and another worker.
var ruleActors = []actor{{oAPI, ""}, {oExec, "exec-1"}, {oWorker, "w1"}, {oWorker, "w2"}}

func TestExecutionEventTypes(t *testing.T) {
	t.Parallel()
	want := []string{
		domain.TypeExecutionAbandoned, domain.TypeExecutionCancelRequested, domain.TypeExecutionCancelled,
		domain.TypeExecutionCompleted, domain.TypeExecutionFailed, domain.TypeExecutionHandoffExpired,
		domain.TypeExecutionRejected, domain.TypeExecutionRequested, domain.TypeExecutionRunning,
		domain.TypeExecutionScheduled, domain.TypeExecutionScheduling, domain.TypeExecutionTimedOut,
		domain.TypeExecutionChildrenRequested,
		domain.TypeExecutionRunFailed, domain.TypeExecutionRetryScheduled, domain.TypeExecutionRequeued,
	}
	sort.Strings(want)
	if got := domain.ExecutionEventTypes(); !slices.Equal(got, want) {
		t.Fatalf("ExecutionEventTypes() = %v, want %v", got, want)
	}
	// Every row of the spec names an execution event type.
	for _, r := range handoffSpec {
		if !slices.Contains(want, r.typ) {
			t.Errorf("spec row for %q: not an execution event", r.typ)
		}
	}
}

// TestHandoffRule checks Execution.Check against the spec table for every
// execution event type, every state, every actor, for plain executions and
// with_items parents.
func TestHandoffRule(t *testing.T) {
	t.Parallel()
	type rowKey struct {
		row   int
		state domain.Status
	}
	// Which (spec row, state) pairs some accepted case exercised, so a spec row
	// that is never reached fails the test instead of passing silently.
	var mu sync.Mutex
	exercised := map[rowKey]bool{}

	for _, parent := range []bool{false, true} {
		for _, state := range domain.AllStatuses {
			for _, typ := range domain.ExecutionEventTypes() {
				kindName := "plain"
				if parent {
					kindName = "parent"
				}
				stateName := string(state)
				if state == domain.StatusNew {
					stateName = "new"
				}
				t.Run(fmt.Sprintf("%s/%s/%s", kindName, stateName, typ), func(t *testing.T) {
					t.Parallel()
					for _, a := range ruleActors {
						x, _ := execIn(t, state, parent)
						// A stream with no events is not a parent yet.
						isParent := parent && state != domain.StatusNew
						if x.IsParent() != isParent {
							t.Fatalf("IsParent() = %v, want %v", x.IsParent(), isParent)
						}
						wantRule, wantTo := specVerdict(typ, state, isParent, a.owner, a.writer == "w1")
						err := x.Check(typ, a.owner, a.writer)
						if wantRule == "" {
							if err != nil {
								t.Errorf("%s: refused, spec allows it: %v", a, err)
								continue
							}
							for i, r := range handoffSpec {
								if r.typ == typ && r.owner == a.owner && r.applies(isParent) && slices.Contains(r.from, state) {
									mu.Lock()
									exercised[rowKey{i, state}] = true
									mu.Unlock()
								}
							}
							// The state the rule leads to is the state Apply reaches.
							x.Apply(exampleEvent(typ), uint64(x.Version()+1), t0)
							if x.Status() != wantTo {
								t.Errorf("%s: after Apply the state is %q, spec says %q", a, x.Status(), wantTo)
							}
							continue
						}
						checkRuleError(t, a.String(), err, wantRule)
						var re *domain.RuleError
						if errors.As(err, &re) {
							if re.Event != typ || re.State != state || re.Owner != a.owner || re.Writer != a.writer || re.Execution != x.ID() {
								t.Errorf("%s: RuleError fields %+v do not describe the attempt", a, *re)
							}
							if re.Error() == "" {
								t.Errorf("%s: empty error message", a)
							}
						}
					}
				})
			}
		}
	}
	t.Cleanup(func() {
		for i, r := range handoffSpec {
			for _, s := range r.from {
				if !exercised[rowKey{i, s}] {
					t.Errorf("spec row %d (%s by %s from %q) was never accepted in any case", i, r.typ, r.owner, s)
				}
			}
		}
	})
}

// checkRuleError asserts err is a *RuleError of the given rule matching
// ErrRuleViolation and the rule's sentinel.
func checkRuleError(t *testing.T, what string, err error, rule string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted, want refusal by rule %q", what, rule)
		return
	}
	var re *domain.RuleError
	if !errors.As(err, &re) {
		t.Errorf("%s: error %v (%T) is not a *RuleError", what, err, err)
		return
	}
	if re.Rule != rule {
		t.Errorf("%s: rule %q, want %q (%v)", what, re.Rule, rule, err)
	}
	if !errors.Is(err, domain.ErrRuleViolation) {
		t.Errorf("%s: %v does not match ErrRuleViolation", what, err)
	}
	if !errors.Is(err, ruleSentinel[rule]) {
		t.Errorf("%s: %v does not match %v", what, err, ruleSentinel[rule])
	}
	for r, s := range ruleSentinel {
		if !errors.Is(s, ruleSentinel[rule]) && r != rule && errors.Is(err, s) {
			t.Errorf("%s: %v also matches %v", what, err, s)
		}
	}
}

// exampleEvent returns a payload of an execution event type that is valid
// for an execution handed to "w1" at attempt 1.
func exampleEvent(typ string) domain.Event {
	switch typ {
	case domain.TypeExecutionRequested:
		return domain.ExecutionRequested{Action: "act"}
	case domain.TypeExecutionRejected:
		return domain.ExecutionRejected{Reason: "full", Code: domain.RejectQueueFull}
	case domain.TypeExecutionScheduling:
		return domain.ExecutionScheduling{}
	case domain.TypeExecutionScheduled:
		return domain.ExecutionScheduled{Worker: "w1", Attempt: 1}
	case domain.TypeExecutionRunning:
		return domain.ExecutionRunning{Worker: "w1", Attempt: 1}
	case domain.TypeExecutionCompleted:
		return domain.ExecutionCompleted{}
	case domain.TypeExecutionFailed:
		return domain.ExecutionFailed{Error: "boom"}
	case domain.TypeExecutionTimedOut:
		return domain.ExecutionTimedOut{TimeoutMillis: 1}
	case domain.TypeExecutionCancelled:
		return domain.ExecutionCancelled{}
	case domain.TypeExecutionCancelRequested:
		return domain.ExecutionCancelRequested{}
	case domain.TypeExecutionHandoffExpired:
		return domain.ExecutionHandoffExpired{Worker: "w1", Attempt: 1}
	case domain.TypeExecutionAbandoned:
		return domain.ExecutionAbandoned{Worker: "w1", Attempt: 1}
	case domain.TypeExecutionChildrenRequested:
		return domain.ExecutionChildrenRequested{First: 0, Count: 1}
	case domain.TypeExecutionRunFailed:
		return domain.ExecutionRunFailed{Worker: "w1", Attempt: 1, Error: "boom"}
	case domain.TypeExecutionRetryScheduled:
		return domain.ExecutionRetryScheduled{Attempt: 1, BackoffMillis: 10, Action: "act"}
	case domain.TypeExecutionRequeued:
		return domain.ExecutionRequeued{Action: "act"}
	}
	panic("no example for " + typ)
}

func TestCheckRefusesNonExecutionEvents(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{domain.TypeQueueGranted, domain.TypeActionDefined, domain.TypeWorkerLost, "execution.nope", ""} {
		x, _ := execIn(t, domain.StatusRunning, false)
		checkRuleError(t, typ, x.Check(typ, oExec, ""), domain.RuleUnknown)
	}
}

// TestHandoffRuleAfterTakeBack: after a handoff expiry or an abandonment the
// executor owns the execution again and the old worker may write nothing;
// after a new handoff only the new worker may.
func TestHandoffRuleAfterTakeBack(t *testing.T) {
	t.Parallel()
	for _, takeBack := range []string{"expire", "abandon"} {
		t.Run(takeBack, func(t *testing.T) {
			t.Parallel()
			l := newExecLog(t, "e")
			x := l.x
			l.must(x.Request(domain.ExecutionRequested{Action: "act"}))
			l.must(x.Grant(""))
			at := l.must(x.Schedule("w1", "w1-i1", testPolicy()))
			if takeBack == "expire" {
				l.must(x.ExpireHandoff(at.Add(testPolicy().ScheduledTimeout())))
			} else {
				l.must(x.Start("w1"))
				l.must(x.Abandon("worker lost"))
			}
			if x.Status() != domain.StatusScheduling || x.Owner() != oExec {
				t.Fatalf("after %s: state %q owner %q, want scheduling/executor", takeBack, x.Status(), x.Owner())
			}
			for _, typ := range []string{domain.TypeExecutionRunning, domain.TypeExecutionCompleted, domain.TypeExecutionCancelled} {
				if err := x.Check(typ, oWorker, "w1"); err == nil {
					t.Errorf("%s by the old worker accepted after %s", typ, takeBack)
				}
			}
			l.must(x.Schedule("w2", "w2-i1", testPolicy()))
			checkRuleError(t, "old worker starts", x.Check(domain.TypeExecutionRunning, oWorker, "w1"), domain.RuleHandoff)
			if err := x.Check(domain.TypeExecutionRunning, oWorker, "w2"); err != nil {
				t.Errorf("new worker refused: %v", err)
			}
			if x.Attempt() != 2 || x.Worker() != "w2" {
				t.Errorf("attempt %d worker %q, want 2 w2", x.Attempt(), x.Worker())
			}
		})
	}
}

// TestValidatePayload: Validate checks what an event's payload claims on top
// of the rule.
func TestValidatePayload(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		state  domain.Status
		parent bool
		ev     domain.Event
		owner  domain.Owner
		writer string
		rule   string // "" for accepted
	}{
		{"scheduled ok", sScheduling, false, domain.ExecutionScheduled{Worker: "w1", Attempt: 1}, oExec, "", ""},
		{"scheduled attempt repeats", sScheduling, false, domain.ExecutionScheduled{Worker: "w1", Attempt: 0}, oExec, "", domain.RuleAttempt},
		{"scheduled attempt skips", sScheduling, false, domain.ExecutionScheduled{Worker: "w1", Attempt: 2}, oExec, "", domain.RuleAttempt},
		{"scheduled to nobody", sScheduling, false, domain.ExecutionScheduled{Attempt: 1}, oExec, "", domain.RuleAttempt},
		{"running ok", sScheduled, false, domain.ExecutionRunning{Worker: "w1", Attempt: 1}, oWorker, "w1", ""},
		{"running wrong attempt", sScheduled, false, domain.ExecutionRunning{Worker: "w1", Attempt: 2}, oWorker, "w1", domain.RuleAttempt},
		{"running names another worker", sScheduled, false, domain.ExecutionRunning{Worker: "w2", Attempt: 1}, oWorker, "w1", domain.RuleAttempt},
		{"running written by another worker", sScheduled, false, domain.ExecutionRunning{Worker: "w2", Attempt: 1}, oWorker, "w2", domain.RuleHandoff},
		{"parent running carries no worker", sRequested, true, domain.ExecutionRunning{}, oExec, "", ""},
		{"expired ok", sScheduled, false, domain.ExecutionHandoffExpired{Worker: "w1", Attempt: 1}, oExec, "", ""},
		{"expired wrong worker", sScheduled, false, domain.ExecutionHandoffExpired{Worker: "w2", Attempt: 1}, oExec, "", domain.RuleAttempt},
		{"expired wrong attempt", sScheduled, false, domain.ExecutionHandoffExpired{Worker: "w1", Attempt: 2}, oExec, "", domain.RuleAttempt},
		{"abandoned ok", sRunning, false, domain.ExecutionAbandoned{Worker: "w1", Attempt: 1}, oExec, "", ""},
		{"abandoned wrong worker", sRunning, false, domain.ExecutionAbandoned{Worker: "w2", Attempt: 1}, oExec, "", domain.RuleAttempt},
		{"abandoned wrong attempt", sScheduled, false, domain.ExecutionAbandoned{Worker: "w1", Attempt: 0}, oExec, "", domain.RuleAttempt},
		{"rule before payload", sRunning, false, domain.ExecutionAbandoned{Worker: "w2"}, oWorker, "w1", domain.RuleOwner},
		{"completed by the worker", sRunning, false, domain.ExecutionCompleted{}, oWorker, "w1", ""},
		{"completed by another worker", sRunning, false, domain.ExecutionCompleted{}, oWorker, "w2", domain.RuleHandoff},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			x, _ := execIn(t, tc.state, tc.parent)
			err := x.Validate(tc.ev, tc.owner, tc.writer)
			if tc.rule == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			checkRuleError(t, tc.name, err, tc.rule)
		})
	}
}

func TestStatusPredicates(t *testing.T) {
	t.Parallel()
	terminal := map[domain.Status]bool{
		domain.StatusCompleted: true, domain.StatusFailed: true, domain.StatusTimedOut: true,
		domain.StatusCancelled: true, domain.StatusRejected: true,
	}
	if len(domain.AllStatuses) != 10 || domain.AllStatuses[0] != domain.StatusNew {
		t.Fatalf("AllStatuses = %v", domain.AllStatuses)
	}
	for _, s := range domain.AllStatuses {
		if s.Terminal() != terminal[s] {
			t.Errorf("%q.Terminal() = %v", s, s.Terminal())
		}
		if s.Valid() != (s != domain.StatusNew) {
			t.Errorf("%q.Valid() = %v", s, s.Valid())
		}
	}
	if domain.Status("paused").Valid() || domain.Status("paused").Terminal() {
		t.Error("an unknown status is valid or terminal")
	}
}

func TestExecutionOwner(t *testing.T) {
	t.Parallel()
	tests := []struct {
		state  domain.Status
		parent bool
		want   domain.Owner
	}{
		{sNew, false, oExec}, {sRequested, false, oExec}, {sScheduling, false, oExec},
		{sScheduled, false, oWorker}, {sRunning, false, oWorker},
		{domain.StatusCompleted, false, ""}, {domain.StatusRejected, false, ""},
		{sRequested, true, oExec}, {sRunning, true, oExec}, {domain.StatusFailed, true, ""},
	}
	for _, tc := range tests {
		x, _ := execIn(t, tc.state, tc.parent)
		if got := x.Owner(); got != tc.want {
			t.Errorf("Owner() in %q (parent %v) = %q, want %q", tc.state, tc.parent, got, tc.want)
		}
	}
}
