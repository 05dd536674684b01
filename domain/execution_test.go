package domain_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/internal/valuediff"
)

func TestRequestValidation(t *testing.T) {
	t.Parallel()
	big := `{"k":"` + strings.Repeat("x", domain.MaxInputBytes) + `"}`
	tests := []struct {
		name string
		req  domain.ExecutionRequested
		ok   bool
	}{
		{"object input", domain.ExecutionRequested{Action: "a", Input: json.RawMessage(`{"a":[1,2]}`)}, true},
		{"object input with spaces", domain.ExecutionRequested{Action: "a", Input: json.RawMessage(" \n{ } ")}, true},
		{"no input", domain.ExecutionRequested{Action: "a"}, true},
		{"null input", domain.ExecutionRequested{Action: "a", Input: json.RawMessage(`null`)}, true},
		{"input at the limit", domain.ExecutionRequested{Action: "a", Input: json.RawMessage(big[:domain.MaxInputBytes-2] + `"}`)}, true},
		{"input over the limit", domain.ExecutionRequested{Action: "a", Input: json.RawMessage(big)}, false},
		{"array input", domain.ExecutionRequested{Action: "a", Input: json.RawMessage(`[1]`)}, false},
		{"string input", domain.ExecutionRequested{Action: "a", Input: json.RawMessage(`"s"`)}, false},
		{"number input", domain.ExecutionRequested{Action: "a", Input: json.RawMessage(`1`)}, false},
		{"broken object", domain.ExecutionRequested{Action: "a", Input: json.RawMessage(`{"a":`)}, false},
		{"two objects", domain.ExecutionRequested{Action: "a", Input: json.RawMessage(`{}{}`)}, false},
		{"empty action", domain.ExecutionRequested{}, false},
		{"action with a space", domain.ExecutionRequested{Action: "a b"}, false},
		{"action starting with a dot", domain.ExecutionRequested{Action: ".a"}, false},
		{"action too long", domain.ExecutionRequested{Action: strings.Repeat("a", domain.MaxRefLen+1)}, false},
		{"action at max length", domain.ExecutionRequested{Action: strings.Repeat("a", domain.MaxRefLen)}, true},
		{"with_items parent", domain.ExecutionRequested{Action: "a", Items: 3, Concurrency: 2, WithItems: items(`1`, `{"a":1}`, `"s"`)}, true},
		{"with_items, items count left out", domain.ExecutionRequested{Action: "a", Concurrency: 2, WithItems: items(`1`, `2`, `3`)}, true},
		{"items count without the items", domain.ExecutionRequested{Action: "a", Items: 3, Concurrency: 2}, false},
		{"items count and items disagree", domain.ExecutionRequested{Action: "a", Items: 2, WithItems: items(`1`, `2`, `3`)}, false},
		{"item not JSON", domain.ExecutionRequested{Action: "a", WithItems: items(`1`, `{`)}, false},
		{"too many items", domain.ExecutionRequested{Action: "a", WithItems: make([]json.RawMessage, domain.MaxItems+1)}, false},
		{"items too big together", domain.ExecutionRequested{Action: "a", WithItems: items(`"`+strings.Repeat("x", domain.MaxItemsBytes/2)+`"`, `"`+strings.Repeat("x", domain.MaxItemsBytes/2)+`"`)}, false},
		{"child input too big", domain.ExecutionRequested{Action: "a", Input: json.RawMessage(big[:domain.MaxInputBytes-2] + `"}`), WithItems: items(`{"b":1}`)}, false},
		{"negative items", domain.ExecutionRequested{Action: "a", Items: -1}, false},
		{"negative concurrency", domain.ExecutionRequested{Action: "a", Items: 2, Concurrency: -1, WithItems: items(`1`, `2`)}, false},
		{"concurrency without items", domain.ExecutionRequested{Action: "a", Concurrency: 2}, false},
		{"child", domain.ExecutionRequested{Action: "a", Parent: "p", ItemIndex: 4}, true},
		{"child with items", domain.ExecutionRequested{Action: "a", Parent: "p", WithItems: items(`1`)}, false},
		{"child with a negative index", domain.ExecutionRequested{Action: "a", Parent: "p", ItemIndex: -1}, false},
		{"item index without a parent", domain.ExecutionRequested{Action: "a", ItemIndex: 1}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			x := domain.NewExecution("e1")
			ev, err := x.Request(tc.req)
			if tc.ok {
				if err != nil {
					t.Fatalf("Request: %v", err)
				}
				if ev.Action != tc.req.Action || string(ev.Input) != string(tc.req.Input) || ev.Items != len(tc.req.WithItems) {
					t.Errorf("Request returned %+v for %+v", ev, tc.req)
				}
				return
			}
			if !errors.Is(err, domain.ErrInvalidRequest) {
				t.Fatalf("Request = %v, want ErrInvalidRequest", err)
			}
		})
	}
	t.Run("twice", func(t *testing.T) {
		t.Parallel()
		x, _ := execIn(t, domain.StatusRequested, false)
		_, err := x.Request(domain.ExecutionRequested{Action: "a"})
		checkRuleError(t, "second request", err, domain.RuleTransition)
	})
}

func TestScheduleAttempts(t *testing.T) {
	t.Parallel()
	p := testPolicy()
	p.MaxAttempts, p.Runner, p.TimeoutSeconds = 2, "core.echo", 2.5
	l := newExecLog(t, "e1")
	x := l.x
	l.must(x.Request(domain.ExecutionRequested{Action: "act", Input: json.RawMessage(`{"a":1}`)}))
	l.must(x.Grant(""))
	if _, err := x.Schedule("", "", p); !errors.Is(err, domain.ErrInvalidRequest) {
		t.Fatalf("Schedule to no worker = %v, want ErrInvalidRequest", err)
	}
	ev, err := x.Schedule("w1", "w1-a", p)
	if err != nil {
		t.Fatal(err)
	}
	want := domain.ExecutionScheduled{
		Worker: "w1", Incarnation: "w1-a", Attempt: 1, Action: "act", Runner: "core.echo",
		Input: json.RawMessage(`{"a":1}`), TimeoutMillis: 2500, ScheduledTimeoutMS: 10000,
	}
	if d := valuediff.Diff(ev, want); d != "" {
		t.Fatalf("Schedule = %+v, want %+v (%s)", ev, want, d)
	}
	at := l.apply(ev)
	if x.Attempt() != 1 || x.Worker() != "w1" || x.Incarnation() != "w1-a" || !x.ScheduledAt().Equal(at) {
		t.Fatalf("after the handoff: attempt %d worker %q incarnation %q scheduled at %v", x.Attempt(), x.Worker(), x.Incarnation(), x.ScheduledAt())
	}
	l.must(x.ExpireHandoff(x.HandoffDeadline()))

	ev, err = x.Schedule("w2", "w2-a", p)
	if err != nil || ev.Attempt != 2 {
		t.Fatalf("second Schedule = attempt %d, %v; want attempt 2", ev.Attempt, err)
	}
	l.apply(ev)
	l.must(x.Start("w2"))
	l.must(x.Abandon("worker lost"))
	if x.Attempt() != 2 || x.Status() != domain.StatusScheduling {
		t.Fatalf("after abandon: attempt %d state %q", x.Attempt(), x.Status())
	}

	if _, err := x.Schedule("w1", "w1-b", p); !errors.Is(err, domain.ErrAttemptsExhausted) {
		t.Fatalf("third Schedule with max_attempts 2 = %v, want ErrAttemptsExhausted", err)
	}
	// A more generous policy (a policy change) allows another attempt; no
	// limit at all never exhausts.
	p.MaxAttempts = 3
	if ev, err := x.Schedule("w1", "w1-b", p); err != nil || ev.Attempt != 3 {
		t.Fatalf("Schedule with max_attempts 3 = %+v, %v", ev, err)
	}
	p.MaxAttempts = 0
	if _, err := x.Schedule("w1", "w1-b", p); err != nil {
		t.Fatalf("Schedule without a limit: %v", err)
	}
	// Attempts exhausted: the executor fails the execution.
	l.must(x.Fail(oExec, "exec-1", "no attempts left", nil))
	if x.Status() != domain.StatusFailed || x.State().Error != "no attempts left" {
		t.Fatalf("after Fail: %+v", x.State())
	}
	if _, err := x.Schedule("w1", "w1-b", p); !errors.Is(err, domain.ErrAlreadyTerminal) {
		t.Fatalf("Schedule after the end = %v, want ErrAlreadyTerminal", err)
	}
}

func TestExpireHandoff(t *testing.T) {
	t.Parallel()
	l := newExecLog(t, "e1")
	x := l.x
	l.must(x.Request(domain.ExecutionRequested{Action: "act"}))
	if _, err := x.ExpireHandoff(t0.Add(time.Hour)); !errors.Is(err, domain.ErrIllegalTransition) {
		t.Fatalf("ExpireHandoff before any handoff = %v, want a transition refusal", err)
	}
	l.must(x.Grant(""))
	at := l.must(x.Schedule("w1", "i", testPolicy())) // scheduled_timeout 10s
	deadline := at.Add(10 * time.Second)
	if !x.HandoffDeadline().Equal(deadline) {
		t.Fatalf("HandoffDeadline = %v, want %v", x.HandoffDeadline(), deadline)
	}
	for _, now := range []time.Time{at, deadline.Add(-time.Nanosecond), at.Add(-time.Hour)} {
		if _, err := x.ExpireHandoff(now); !errors.Is(err, domain.ErrHandoffNotExpired) {
			t.Errorf("ExpireHandoff at %v = %v, want ErrHandoffNotExpired", now, err)
		}
	}
	for _, now := range []time.Time{deadline, deadline.Add(time.Hour)} {
		ev, err := x.ExpireHandoff(now)
		if err != nil || ev != (domain.ExecutionHandoffExpired{Worker: "w1", Attempt: 1}) {
			t.Errorf("ExpireHandoff at %v = %+v, %v", now, ev, err)
		}
	}
	l.must(x.Start("w1"))
	if _, err := x.ExpireHandoff(deadline.Add(time.Hour)); !errors.Is(err, domain.ErrRuleViolation) {
		t.Fatalf("ExpireHandoff once running = %v, want a rule violation", err)
	}
}

func TestRequestCancel(t *testing.T) {
	t.Parallel()
	l := newExecLog(t, "e1")
	x := l.x
	if _, err := x.RequestCancel("x"); !errors.Is(err, domain.ErrIllegalTransition) {
		t.Fatalf("RequestCancel on a new stream = %v", err)
	}
	l.must(x.Request(domain.ExecutionRequested{Action: "act"}))
	ev, err := x.RequestCancel(strings.Repeat("r", domain.MaxReasonLen+10))
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.Reason) != domain.MaxReasonLen+len("…") || !strings.HasSuffix(ev.Reason, "…") {
		t.Errorf("reason not clipped to %d bytes: %d", domain.MaxReasonLen, len(ev.Reason))
	}
	l.apply(ev)
	if !x.CancelRequested() || x.Status() != domain.StatusRequested || !x.State().CancelAsked {
		t.Fatalf("after cancel_requested: asked %v state %q", x.CancelRequested(), x.Status())
	}
	if _, err := x.RequestCancel("again"); !errors.Is(err, domain.ErrCancelAlreadyAsked) {
		t.Fatalf("second RequestCancel = %v, want ErrCancelAlreadyAsked", err)
	}
	l.must(x.Cancel(oExec, "exec-1", "asked"))
	_, err = x.RequestCancel("late")
	checkRuleError(t, "RequestCancel after the end", err, domain.RuleTerminal)
}

func TestStateTimestamps(t *testing.T) {
	t.Parallel()
	l := newExecLog(t, "e1")
	x := l.x
	st := x.State()
	if st.Version != -1 || st.Status != domain.StatusNew || st.RequestedAt != nil || st.EndedAt != nil {
		t.Fatalf("state of a new stream: %+v", st)
	}
	req := l.must(x.Request(domain.ExecutionRequested{Action: "act", Parent: "p", ItemIndex: 2, Input: json.RawMessage(`{"i":2}`)}))
	st = x.State()
	if st.RequestedAt == nil || !st.RequestedAt.Equal(req) || st.SchedulingAt != nil || st.ScheduledAt != nil || st.RunningAt != nil || st.EndedAt != nil {
		t.Fatalf("after request: %+v", st)
	}
	grant := l.must(x.Grant("k"))
	sched := l.must(x.Schedule("w1", "i", testPolicy()))
	run := l.must(x.Start("w1"))
	end := l.must(x.Complete(oWorker, "w1", json.RawMessage(`{"ok":true}`)))
	st = x.State()
	for name, got := range map[string]*time.Time{"requested": st.RequestedAt, "scheduling": st.SchedulingAt, "scheduled": st.ScheduledAt, "running": st.RunningAt, "ended": st.EndedAt} {
		want := map[string]time.Time{"requested": req, "scheduling": grant, "scheduled": sched, "running": run, "ended": end}[name]
		if got == nil || !got.Equal(want) {
			t.Errorf("%s at %v, want %v", name, got, want)
		}
	}
	want := domain.ExecutionState{
		ID: "e1", Action: "act", ConcurrencyKey: "k", Parent: "p", ItemIndex: 2, Status: domain.StatusCompleted,
		Worker: "w1", Attempt: 1, Input: json.RawMessage(`{"i":2}`), Result: json.RawMessage(`{"ok":true}`), Version: 4,
		RequestedAt: st.RequestedAt, SchedulingAt: st.SchedulingAt, ScheduledAt: st.ScheduledAt, RunningAt: st.RunningAt, EndedAt: st.EndedAt,
	}
	if d := valuediff.Diff(st, want); d != "" {
		t.Errorf("State() = %+v\nwant %+v (%s)", st, want, d)
	}
	if x.Version() != 4 || x.Action() != "act" || x.ConcurrencyKey() != "k" || x.IsParent() || string(x.Input()) != `{"i":2}` {
		t.Errorf("accessors disagree with the events")
	}
	// The copy is a copy.
	*st.EndedAt = time.Time{}
	if x.State().EndedAt.IsZero() {
		t.Error("State() shares its timestamps with the aggregate")
	}
}

func TestEndStates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		state domain.Status
		err   string
	}{
		{domain.StatusFailed, "boom"},
		{domain.StatusTimedOut, "timed out after 1m0s"},
		{domain.StatusRejected, "full"},
		{domain.StatusCancelled, "queue timeout"},
		{domain.StatusCompleted, ""},
	}
	for _, tc := range tests {
		x, _ := execIn(t, tc.state, false)
		if st := x.State(); st.Error != tc.err || st.EndedAt == nil || x.Owner() != "" {
			t.Errorf("%s: error %q ended %v owner %q", tc.state, st.Error, st.EndedAt, x.Owner())
		}
	}
}

// ---- the property test ----

// execModel is the test's own account of an execution, from the spec table.
type execModel struct {
	status      domain.Status
	parent      bool
	named       string // worker of the latest accepted execution.scheduled
	attempt     int
	cancelAsked bool
	takenBack   bool // the latest handoff was expired or abandoned
	scheduledAt time.Time
	timeout     time.Duration
	ended       int // accepted terminal events
}

// progress orders an execution's life: (attempt, stage), where stage is
// requested < scheduling < scheduled < running < terminal within an attempt.
// A handoff expiry or abandonment closes its attempt and returns to
// scheduling for the next one: from there on (until the next handoff) the
// execution counts as being in the next attempt.
func (m execModel) progress() (attempt, stage int) {
	stages := map[domain.Status]int{sNew: 0, sRequested: 1, sScheduling: 2, sScheduled: 3, sRunning: 4}
	st, ok := stages[m.status]
	if !ok {
		st = 5
	}
	if m.takenBack {
		return m.attempt + 1, st
	}
	return m.attempt, st
}

type propActor struct {
	name   string
	owner  domain.Owner
	writer string
}

var propActors = []propActor{
	{"executor", oExec, "exec-1"},
	{"worker w1", oWorker, "w1"},
	{"worker w2", oWorker, "w2"},
	{"api", oAPI, ""},
}

// TestExecutionProperties drives random commands by random actors against an
// Execution, applies what it accepts, and checks after every step that it
// agrees with the spec table and keeps the lifecycle's invariants.
func TestExecutionProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		p := testPolicy()
		p.MaxAttempts = rapid.IntRange(1, 4).Draw(t, "max_attempts")
		p.ScheduledTimeoutSeconds = float64(rapid.IntRange(1, 10).Draw(t, "scheduled_timeout_s"))
		// Several executions per check: most lives are short.
		for range 5 {
			x := domain.NewExecution("e1")
			m := execModel{}
			var version uint64
			now := t0

			// try runs one command: typ/owner/writer say what the command
			// writes, extra is the command's own precondition beyond the rule
			// (nil when none), and errWant the error it gives when extra fails.
			try := func(typ string, owner domain.Owner, writer string, ev domain.Event, err error, extraOK bool, errWant error) {
				named := m.named != "" && writer == m.named
				rule, to := specVerdict(typ, m.status, m.parent, owner, named)
				switch {
				case rule != "":
					var re *domain.RuleError
					if !errors.As(err, &re) || re.Rule != rule {
						t.Fatalf("%s by %s/%s in %q: got %v, spec refuses by rule %q", typ, owner, writer, m.status, err, rule)
					}
					return
				case !extraOK:
					if !errors.Is(err, errWant) {
						t.Fatalf("%s by %s/%s in %q: got %v, want %v", typ, owner, writer, m.status, err, errWant)
					}
					return
				case err != nil:
					t.Fatalf("%s by %s/%s in %q: refused (%v), the spec allows it", typ, owner, writer, m.status, err)
				}
				// Accepted.
				if m.status.Terminal() || m.ended > 0 {
					t.Fatalf("%s accepted after the end", typ)
				}
				if ev.EventType() != typ {
					t.Fatalf("command for %s returned a %s", typ, ev.EventType())
				}
				if err := x.Validate(ev, owner, writer); err != nil {
					t.Fatalf("accepted %s by %s/%s fails Validate on the state it was decided in: %v", typ, owner, writer, err)
				}
				if owner == oWorker && writer != m.named {
					t.Fatalf("worker event %s written by %q, the handoff named %q", typ, writer, m.named)
				}
				a0, s0 := m.progress()
				prevAttempt := x.Attempt()

				now = now.Add(time.Duration(rapid.IntRange(0, 20).Draw(t, "dt_s")) * time.Second)
				x.Apply(ev, version, now)
				version++

				m.status = to
				if to.Terminal() {
					m.ended++
				}
				switch e := ev.(type) {
				case domain.ExecutionRequested:
					m.parent = e.Items > 0
				case domain.ExecutionScheduled:
					m.named, m.attempt, m.takenBack = e.Worker, e.Attempt, false
					m.scheduledAt, m.timeout = now, time.Duration(e.ScheduledTimeoutMS)*time.Millisecond
				case domain.ExecutionCancelRequested:
					m.cancelAsked = true
				case domain.ExecutionHandoffExpired, domain.ExecutionAbandoned:
					m.takenBack = true
				}

				a1, s1 := m.progress()
				if typ == domain.TypeExecutionCancelRequested {
					if a1 != a0 || s1 != s0 {
						t.Fatalf("cancel_requested moved the execution from (%d,%d) to (%d,%d)", a0, s0, a1, s1)
					}
				} else if a1 < a0 || (a1 == a0 && s1 <= s0) {
					t.Fatalf("%s moved (attempt, stage) from (%d,%d) back or nowhere to (%d,%d)", typ, a0, s0, a1, s1)
				}
				if x.Attempt() != prevAttempt {
					if typ != domain.TypeExecutionScheduled || x.Attempt() != prevAttempt+1 {
						t.Fatalf("attempt went from %d to %d on %s", prevAttempt, x.Attempt(), typ)
					}
				}
				if got := uint64(x.Version()); got != version-1 {
					t.Fatalf("Version() = %d after applying version %d", got, version-1)
				}
			}

			// The current owner acts more often than chance would have it, so
			// that runs get deep into the lifecycle; any actor can still try
			// anything.
			actor := func(t *rapid.T) propActor {
				a := rapid.SampledFrom(append(propActors, propActor{name: "owner"}, propActor{name: "owner"})).Draw(t, "actor")
				if a.name != "owner" {
					return a
				}
				if !m.parent && (m.status == sScheduled || m.status == sRunning) {
					return propActor{"named worker", oWorker, m.named}
				}
				return propActors[0]
			}
			commands := map[string]func(t *rapid.T){
				"request": func(t *rapid.T) {
					r := domain.ExecutionRequested{Action: "act", Input: json.RawMessage(`{"a":1}`)}
					if rapid.IntRange(0, 4).Draw(t, "parent") == 0 {
						r.WithItems, r.Concurrency = items(`1`, `2`, `3`), 1
					}
					ev, err := x.Request(r)
					try(domain.TypeExecutionRequested, oExec, "", ev, err, true, nil)
				},
				"reject": func(t *rapid.T) {
					ev, err := x.Reject(domain.RejectQueueFull, "full")
					try(domain.TypeExecutionRejected, oExec, "", ev, err, true, nil)
				},
				"grant": func(t *rapid.T) {
					ev, err := x.Grant("")
					try(domain.TypeExecutionScheduling, oExec, "", ev, err, true, nil)
				},
				"schedule": func(t *rapid.T) {
					w := rapid.SampledFrom([]string{"w1", "w2"}).Draw(t, "worker")
					ev, err := x.Schedule(w, w+"-i", p)
					try(domain.TypeExecutionScheduled, oExec, "", ev, err, m.attempt < p.MaxAttempts, domain.ErrAttemptsExhausted)
				},
				"start": func(t *rapid.T) {
					a := actor(t)
					ev, err := x.Start(a.writer)
					try(domain.TypeExecutionRunning, oWorker, a.writer, ev, err, true, nil)
				},
				"start parent": func(t *rapid.T) {
					ev, err := x.StartParent()
					try(domain.TypeExecutionRunning, oExec, "", ev, err, true, nil)
				},
				"complete": func(t *rapid.T) {
					a := actor(t)
					ev, err := x.Complete(a.owner, a.writer, json.RawMessage(`{"r":1}`))
					try(domain.TypeExecutionCompleted, a.owner, a.writer, ev, err, true, nil)
				},
				"fail": func(t *rapid.T) {
					a := actor(t)
					ev, err := x.Fail(a.owner, a.writer, "boom", nil)
					try(domain.TypeExecutionFailed, a.owner, a.writer, ev, err, true, nil)
				},
				"time out": func(t *rapid.T) {
					a := actor(t)
					ev, err := x.TimeOut(a.writer, time.Minute)
					try(domain.TypeExecutionTimedOut, oWorker, a.writer, ev, err, true, nil)
				},
				"cancel": func(t *rapid.T) {
					a := actor(t)
					ev, err := x.Cancel(a.owner, a.writer, "stop")
					try(domain.TypeExecutionCancelled, a.owner, a.writer, ev, err, true, nil)
				},
				"request cancel": func(t *rapid.T) {
					ev, err := x.RequestCancel("please")
					try(domain.TypeExecutionCancelRequested, oAPI, "", ev, err, !m.cancelAsked, domain.ErrCancelAlreadyAsked)
				},
				"expire handoff": func(t *rapid.T) {
					at := m.scheduledAt.Add(time.Duration(rapid.IntRange(-12, 12).Draw(t, "expire_offset_s")) * time.Second)
					ev, err := x.ExpireHandoff(at)
					try(domain.TypeExecutionHandoffExpired, oExec, "", ev, err, !at.Before(m.scheduledAt.Add(m.timeout)), domain.ErrHandoffNotExpired)
				},
				"abandon": func(t *rapid.T) {
					ev, err := x.Abandon("worker lost")
					try(domain.TypeExecutionAbandoned, oExec, "", ev, err, true, nil)
				},
			}
			// Weights: the commands that move an execution forward come up more
			// often, and first (rapid leans towards the low indices), the ones
			// that end it early last.
			var deck []string
			for _, c := range []struct {
				name   string
				weight int
			}{
				{"grant", 3}, {"schedule", 3}, {"start", 3}, {"complete", 2}, {"request", 2}, {"time out", 1},
				{"expire handoff", 2}, {"abandon", 1}, {"start parent", 1}, {"fail", 2}, {"request cancel", 1},
				{"cancel", 1}, {"reject", 1},
			} {
				for range c.weight {
					deck = append(deck, c.name)
				}
			}
			check := func() {
				if x.Status() != m.status {
					t.Fatalf("state %q, the spec says %q", x.Status(), m.status)
				}
				if x.Attempt() != m.attempt || x.Worker() != m.named || x.IsParent() != m.parent || x.CancelRequested() != m.cancelAsked {
					t.Fatalf("attempt %d worker %q parent %v cancel %v; model %+v", x.Attempt(), x.Worker(), x.IsParent(), x.CancelRequested(), m)
				}
				if x.Attempt() > p.MaxAttempts {
					t.Fatalf("attempt %d exceeds max_attempts %d", x.Attempt(), p.MaxAttempts)
				}
				if m.ended > 1 {
					t.Fatalf("%d terminal events accepted", m.ended)
				}
				if (x.Owner() == "") != x.Status().Terminal() {
					t.Fatalf("owner %q in state %q", x.Owner(), x.Status())
				}
			}
			check()
			for range 50 {
				commands[rapid.SampledFrom(deck).Draw(t, "command")](t)
				check()
			}
		}
	})
}

func items(raw ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(raw))
	for i, r := range raw {
		out[i] = json.RawMessage(r)
	}
	return out
}

// TestCancelledCodeBeforeIssue35: an execution.cancelled of an older log
// says "requested"; its fold, and a snapshot of that fold taken then, say
// cancel_requested as a newer log's does.
func TestCancelledCodeBeforeIssue35(t *testing.T) {
	t.Parallel()
	for _, code := range []string{domain.CancelRequestedBefore, domain.CancelRequested} {
		l := newExecLog(t, "e1")
		l.must(l.x.Request(domain.ExecutionRequested{Action: "act"}))
		l.apply(domain.ExecutionCancelled{Reason: "asked", Code: code})
		if got := l.x.State().Code; got != domain.CancelRequested {
			t.Errorf("folded from a cancellation coded %q: code %q, want %q", code, got, domain.CancelRequested)
		}
		old := l.x.Snapshot()
		old.Code = code
		if got := domain.RestoreExecution(old).State().Code; got != domain.CancelRequested {
			t.Errorf("restored from a snapshot coded %q: code %q, want %q", code, got, domain.CancelRequested)
		}
	}
	if got := domain.CancelCode(domain.CancelQueueTimeout); got != domain.CancelQueueTimeout {
		t.Errorf("CancelCode(%q) = %q", domain.CancelQueueTimeout, got)
	}
}
