package domain_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
)

// t0 is the log time of the first event in the tests' hand-built streams.
var t0 = time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)

// testPolicy is a valid policy with defaults applied.
func testPolicy() domain.Policy {
	return domain.Policy{Ref: "act", Runner: "core.noop", ScheduledTimeoutSeconds: 10}.WithDefaults()
}

// ---- the handoff rule of DESIGN.md, transcribed independently of rule.go ----

type ruleKind int

const (
	anyKind    ruleKind = iota // plain executions and with_items parents
	plainOnly                  // plain executions only
	parentOnly                 // with_items parents only
)

type specRow struct {
	typ   string
	owner domain.Owner
	from  []domain.Status
	kind  ruleKind
	to    domain.Status // "" keeps the state
}

var (
	sNew        = domain.StatusNew
	sRequested  = domain.StatusRequested
	sScheduling = domain.StatusScheduling
	sScheduled  = domain.StatusScheduled
	sRunning    = domain.StatusRunning
	oAPI        = domain.OwnerAPI
	oExec       = domain.OwnerExecutor
	oWorker     = domain.OwnerWorker
)

// handoffSpec is DESIGN.md's table "The execution lifecycle and the handoff
// rule", row by row. Worker rows also require the writer to be the worker named
// in the latest execution.scheduled.
var handoffSpec = []specRow{
	{domain.TypeExecutionRequested, oExec, []domain.Status{sNew}, anyKind, domain.StatusRequested},
	{domain.TypeExecutionRejected, oExec, []domain.Status{sRequested}, anyKind, domain.StatusRejected},
	{domain.TypeExecutionScheduling, oExec, []domain.Status{sRequested}, plainOnly, domain.StatusScheduling},
	{domain.TypeExecutionScheduled, oExec, []domain.Status{sScheduling}, plainOnly, domain.StatusScheduled},
	{domain.TypeExecutionRunning, oWorker, []domain.Status{sScheduled}, plainOnly, domain.StatusRunning},
	{domain.TypeExecutionRunning, oExec, []domain.Status{sRequested}, parentOnly, domain.StatusRunning}, // fan-out starts
	{domain.TypeExecutionCompleted, oWorker, []domain.Status{sRunning}, plainOnly, domain.StatusCompleted},
	{domain.TypeExecutionCompleted, oExec, []domain.Status{sRunning}, parentOnly, domain.StatusCompleted},
	{domain.TypeExecutionFailed, oWorker, []domain.Status{sRunning}, plainOnly, domain.StatusFailed},
	{domain.TypeExecutionFailed, oExec, []domain.Status{sScheduling}, plainOnly, domain.StatusFailed}, // attempts exhausted
	{domain.TypeExecutionFailed, oExec, []domain.Status{sRequested, sRunning}, parentOnly, domain.StatusFailed},
	{domain.TypeExecutionTimedOut, oWorker, []domain.Status{sRunning}, plainOnly, domain.StatusTimedOut},
	{domain.TypeExecutionCancelled, oExec, []domain.Status{sRequested, sScheduling}, anyKind, domain.StatusCancelled},
	{domain.TypeExecutionCancelled, oWorker, []domain.Status{sScheduled, sRunning}, plainOnly, domain.StatusCancelled},
	{domain.TypeExecutionCancelled, oExec, []domain.Status{sRunning}, parentOnly, domain.StatusCancelled},
	{domain.TypeExecutionCancelRequested, oAPI, []domain.Status{sRequested, sScheduling, sScheduled, sRunning}, anyKind, ""},
	{domain.TypeExecutionCancelRequested, oExec, []domain.Status{sRequested, sScheduling, sScheduled, sRunning}, anyKind, ""}, // a cancelled parent's children
	{domain.TypeExecutionHandoffExpired, oExec, []domain.Status{sScheduled}, plainOnly, domain.StatusScheduling},
	{domain.TypeExecutionAbandoned, oExec, []domain.Status{sScheduled, sRunning}, plainOnly, domain.StatusScheduling},
	{domain.TypeExecutionChildrenRequested, oExec, []domain.Status{sRunning}, parentOnly, ""},                    // fan-out, fenced by the parent's version
	{domain.TypeExecutionRunFailed, oWorker, []domain.Status{sRunning}, plainOnly, domain.StatusScheduling},      // a run that will be retried
	{domain.TypeExecutionRetryScheduled, oExec, []domain.Status{sScheduling}, plainOnly, domain.StatusRequested}, // back off, slot released
	{domain.TypeExecutionRequeued, oExec, []domain.Status{sRequested}, plainOnly, ""},                            // the backoff ended
}

func (r specRow) applies(parent bool) bool {
	return r.kind == anyKind || (r.kind == parentOnly) == parent
}

// specVerdict returns the rule the spec says an event breaks ("" when it is
// allowed) and, when allowed, the state it leads to. named says whether the
// writer is the worker named in the latest handoff.
func specVerdict(typ string, state domain.Status, parent bool, owner domain.Owner, named bool) (rule string, to domain.Status) {
	if state.Terminal() {
		return domain.RuleTerminal, ""
	}
	stateMatches := false
	for _, r := range handoffSpec {
		if r.typ != typ || !r.applies(parent) || !slices.Contains(r.from, state) {
			continue
		}
		stateMatches = true
		if r.owner != owner {
			continue
		}
		if owner == oWorker && !named {
			return domain.RuleHandoff, ""
		}
		if r.to == "" {
			return "", state
		}
		return "", r.to
	}
	if stateMatches {
		return domain.RuleOwner, ""
	}
	return domain.RuleTransition, ""
}

// ruleSentinel is the specific sentinel a RuleError of each rule matches.
var ruleSentinel = map[string]error{
	domain.RuleOwner:      domain.ErrWrongOwner,
	domain.RuleHandoff:    domain.ErrNotHandoffWorker,
	domain.RuleTransition: domain.ErrIllegalTransition,
	domain.RuleTerminal:   domain.ErrAlreadyTerminal,
	domain.RuleAttempt:    domain.ErrIllegalTransition,
	domain.RuleUnknown:    domain.ErrIllegalTransition,
}

// ---- building executions in a given state ----

// execLog applies events to an execution at consecutive versions and times.
type execLog struct {
	t   testing.TB
	x   *domain.Execution
	ver uint64
	at  time.Time
	evs []domain.Event
	ats []time.Time
}

func newExecLog(t testing.TB, id string) *execLog {
	return &execLog{t: t, x: domain.NewExecution(id), at: t0}
}

// apply folds ev at the next version, one second after the previous event.
func (l *execLog) apply(ev domain.Event) time.Time {
	at := l.at
	l.x.Apply(ev, l.ver, at)
	l.evs, l.ats = append(l.evs, ev), append(l.ats, at)
	l.ver++
	l.at = l.at.Add(time.Second)
	return at
}

// must applies the event a command decided, failing the test if it refused.
func (l *execLog) must(ev domain.Event, err error) time.Time {
	l.t.Helper()
	if err != nil {
		l.t.Fatalf("%s refused in state %q: %v", ev.EventType(), l.x.Status(), err)
	}
	return l.apply(ev)
}

// execIn returns an execution in state s, handed (if ever) to worker "w1",
// reached through the commands a real executor and worker would issue. A
// with_items parent never reaches scheduling, scheduled or timed_out; for
// those states the events are applied without a command (Apply never
// validates), and forced reports it.
func execIn(t testing.TB, s domain.Status, parent bool) (x *domain.Execution, forced bool) {
	t.Helper()
	l := newExecLog(t, "ex-"+string(s))
	x = l.x
	if s == domain.StatusNew {
		return x, false
	}
	req := domain.ExecutionRequested{Action: "act", Input: json.RawMessage(`{"n":1}`)}
	if parent {
		req.WithItems, req.Concurrency = []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`{"n":2}`), json.RawMessage(`"x"`)}, 2
	}
	l.must(x.Request(req))
	p := testPolicy()
	if parent {
		switch s {
		case domain.StatusRequested:
		case domain.StatusRejected:
			l.must(x.Reject(domain.RejectQueueFull, "full"))
		case domain.StatusRunning:
			l.must(x.StartParent())
		case domain.StatusCompleted:
			l.must(x.StartParent())
			l.must(x.Complete(oExec, "", json.RawMessage(`{"children":3}`)))
		case domain.StatusFailed:
			l.must(x.StartParent())
			l.must(x.Fail(oExec, "", "child failed", nil))
		case domain.StatusCancelled:
			l.must(x.StartParent())
			l.must(x.Cancel(oExec, "", "asked"))
		case domain.StatusScheduling:
			l.apply(domain.ExecutionScheduling{})
			forced = true
		case domain.StatusScheduled:
			l.apply(domain.ExecutionScheduling{})
			l.apply(domain.ExecutionScheduled{Worker: "w1", Attempt: 1})
			forced = true
		case domain.StatusTimedOut:
			l.must(x.StartParent())
			l.apply(domain.ExecutionTimedOut{TimeoutMillis: 1000})
			forced = true
		default:
			t.Fatalf("execIn: no way to state %q", s)
		}
		if x.Status() != s {
			t.Fatalf("execIn: parent reached %q, want %q", x.Status(), s)
		}
		return x, forced
	}
	switch s {
	case domain.StatusRequested:
	case domain.StatusRejected:
		l.must(x.Reject(domain.RejectQueueFull, "full"))
	case domain.StatusCancelled:
		l.must(x.Cancel(oExec, "", "queue timeout"))
	default:
		l.must(x.Grant(""))
		if s == domain.StatusScheduling {
			break
		}
		l.must(x.Schedule("w1", "w1-i1", p))
		if s == domain.StatusScheduled {
			break
		}
		l.must(x.Start("w1"))
		switch s {
		case domain.StatusRunning:
		case domain.StatusCompleted:
			l.must(x.Complete(oWorker, "w1", json.RawMessage(`{"ok":true}`)))
		case domain.StatusFailed:
			l.must(x.Fail(oWorker, "w1", "boom", nil))
		case domain.StatusTimedOut:
			l.must(x.TimeOut("w1", time.Minute))
		default:
			t.Fatalf("execIn: no way to state %q", s)
		}
	}
	if x.Status() != s {
		t.Fatalf("execIn: reached %q, want %q", x.Status(), s)
	}
	return x, false
}
