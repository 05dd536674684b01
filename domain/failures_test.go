package domain_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/internal/valuediff"
)

func TestClipReasonKeepsUTF8(t *testing.T) {
	t.Parallel()
	for _, prefix := range []int{domain.MaxReasonLen - 1, domain.MaxReasonLen - 2, domain.MaxReasonLen - 3} {
		msg := strings.Repeat("a", prefix) + strings.Repeat("é€😀", 10)
		x, _ := execIn(t, domain.StatusRunning, false)
		ev, err := x.Fail(oWorker, "w1", msg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !utf8.ValidString(ev.Error) || !strings.HasSuffix(ev.Error, "…") || len(ev.Error) > domain.MaxReasonLen+len("…") {
			t.Fatalf("prefix %d: clipped reason is %d bytes, valid UTF-8 %v", prefix, len(ev.Error), utf8.ValidString(ev.Error))
		}
	}
	long := strings.Repeat("ü", 100) // clip of a policy ref in an error message
	err := domain.ValidateRef(long)
	if err == nil || !utf8.ValidString(err.Error()) {
		t.Fatalf("ValidateRef error %q is not valid UTF-8", err)
	}
}

// TestRunningAtIsPerAttempt: after a take-back, the state shows no running
// time until the next attempt runs, and then that attempt's.
func TestRunningAtIsPerAttempt(t *testing.T) {
	t.Parallel()
	for _, takeBack := range []string{"abandoned", "expired"} {
		l := newExecLog(t, "e1")
		x := l.x
		p := testPolicy()
		l.must(x.Request(domain.ExecutionRequested{Action: "act"}))
		l.must(x.Grant(""))
		l.must(x.Schedule("w1", "i1", p))
		first := l.must(x.Start("w1"))
		if takeBack == "abandoned" {
			l.must(x.Abandon("lost"))
		} else {
			// Only a scheduled handoff expires: take the running one back by
			// hand, the state after is what matters.
			l.apply(domain.ExecutionHandoffExpired{Worker: "w1", Attempt: 1})
		}
		if st := x.State(); st.RunningAt != nil {
			t.Fatalf("%s: running_at %v kept from attempt 1", takeBack, st.RunningAt)
		}
		l.must(x.Schedule("w2", "i2", p))
		if st := x.State(); st.RunningAt != nil {
			t.Fatalf("%s: running_at %v before attempt 2 runs", takeBack, st.RunningAt)
		}
		second := l.must(x.Start("w2"))
		if st := x.State(); st.RunningAt == nil || !st.RunningAt.Equal(second) || second.Equal(first) {
			t.Fatalf("%s: running_at %v, want attempt 2's %v", takeBack, st.RunningAt, second)
		}
	}
}

func TestHolds(t *testing.T) {
	t.Parallel()
	l := newExecLog(t, "e1")
	x := l.x
	p := testPolicy()
	l.must(x.Request(domain.ExecutionRequested{Action: "act"}))
	l.must(x.Grant(""))
	l.must(x.Schedule("w1", "i1", p))
	if err := x.Holds("w1", "i1", 1); err != nil {
		t.Fatalf("the handoff's own worker: %v", err)
	}
	checkRuleError(t, "another worker", x.Holds("w2", "i1", 1), domain.RuleHandoff)
	checkRuleError(t, "another incarnation", x.Holds("w1", "i0", 1), domain.RuleAttempt)
	l.must(x.ExpireHandoff(l.at.Add(time.Hour)))
	checkRuleError(t, "taken back", x.Holds("w1", "i1", 1), domain.RuleTransition)
	// Handed again to the same worker id, a new incarnation: the old run's
	// handoff is not the current one.
	l.must(x.Schedule("w1", "i2", p))
	checkRuleError(t, "old attempt, same worker", x.Holds("w1", "i1", 1), domain.RuleAttempt)
	checkRuleError(t, "old incarnation, new attempt", x.Holds("w1", "i1", 2), domain.RuleAttempt)
	if err := x.Holds("w1", "i2", 2); err != nil {
		t.Fatalf("the new handoff: %v", err)
	}
	l.must(x.Start("w1"))
	l.must(x.Complete(oWorker, "w1", nil))
	checkRuleError(t, "ended", x.Holds("w1", "i2", 2), domain.RuleTerminal)
}

func TestRegisterRefusesAPastIncarnation(t *testing.T) {
	t.Parallel()
	w := domain.NewWorker("w1")
	l := &workerLog{t: t, w: w}
	l.at(t0).must(w.Register("i1", 1, nil, "", 0))
	if _, err := w.Register("i1", 1, nil, "", 0); !errors.Is(err, domain.ErrIncarnationReused) {
		t.Fatalf("Register of the current incarnation = %v, want ErrIncarnationReused", err)
	}
	l.at(t0.Add(time.Minute)).must(w.DeclareLost(t0.Add(time.Minute), time.Second, false, "lease"))
	if _, err := w.Register("i1", 1, nil, "", 0); !errors.Is(err, domain.ErrIncarnationReused) {
		t.Fatalf("Register of the lost incarnation = %v, want ErrIncarnationReused", err)
	}
	l.must(w.Register("i2", 1, nil, "", 0))
	if _, err := w.Register("i1", 1, nil, "", 0); !errors.Is(err, domain.ErrIncarnationReused) {
		t.Fatalf("Register of an older incarnation = %v, want ErrIncarnationReused", err)
	}
	if w.Incarnation() != "i2" || w.Status() != domain.WorkerActive {
		t.Fatalf("incarnation %q status %q", w.Incarnation(), w.Status())
	}
}

func TestChildIDAndInput(t *testing.T) {
	t.Parallel()
	a, again := domain.ChildID("p", 0), domain.ChildID("p", 0)
	if a != again || a == domain.ChildID("p", 1) || a == domain.ChildID("q", 0) {
		t.Fatal("child ids are not one per (parent, index)")
	}
	for _, tc := range []struct{ parent, item, want string }{
		{`{"a":1,"b":2}`, `{"b":3,"c":4}`, `{"a":1,"b":3,"c":4}`},
		{`{"a":1}`, `"x"`, `{"a":1,"item":"x"}`},
		{``, `[1,2]`, `{"item":[1,2]}`},
		{`null`, `7`, `{"item":7}`},
		{`{"item":0}`, `null`, `{"item":null}`},
	} {
		got, err := domain.ChildInput(json.RawMessage(tc.parent), json.RawMessage(tc.item))
		if err != nil || !valuediff.SameJSON(got, []byte(tc.want)) {
			t.Errorf("ChildInput(%s, %s) = %s, %v; want %s", tc.parent, tc.item, got, err, tc.want)
		}
	}
	if _, err := domain.ChildInput(json.RawMessage(`{}`), json.RawMessage(`{`)); !errors.Is(err, domain.ErrInvalidRequest) {
		t.Fatalf("a broken item: %v", err)
	}
	x, _ := execIn(t, domain.StatusRunning, true)
	st := x.State()
	want := []string{domain.ChildID(x.ID(), 0), domain.ChildID(x.ID(), 1), domain.ChildID(x.ID(), 2)}
	if !slices.Equal(st.Children, want) || !slices.Equal(x.Children(), want) || x.Items() != 3 || x.Window() != 2 {
		t.Fatalf("children %v items %d window %d", st.Children, x.Items(), x.Window())
	}
	if string(x.Item(1)) != `{"n":2}` || x.Item(3) != nil {
		t.Fatalf("Item(1) = %s, Item(3) = %s", x.Item(1), x.Item(3))
	}
}

func TestPolicyKeyOf(t *testing.T) {
	t.Parallel()
	p := domain.Policy{ConcurrencyKey: "tenant"}
	for _, tc := range []struct {
		in, key string
		ok      bool
	}{
		{`{"tenant":"acme"}`, "acme", true},
		{`{"tenant":""}`, "", true},
		{`{"tenant":42}`, "42", true},
		{`{"tenant":true}`, "true", true},
		{`{"tenant":"a\u00e9"}`, "aé", true},
		{`{}`, "", false},
		{``, "", false},
		{`{"tenant":null}`, "", false},
		{`{"tenant":{"id":1}}`, "", false},
		{`{"tenant":[1]}`, "", false},
		{`{"tenant":"` + strings.Repeat("k", domain.MaxKeyLen+1) + `"}`, "", false},
	} {
		key, err := p.KeyOf(json.RawMessage(tc.in))
		if tc.ok != (err == nil) || key != tc.key || (err != nil && !errors.Is(err, domain.ErrInvalidRequest)) {
			t.Errorf("KeyOf(%s) = %q, %v", tc.in, key, err)
		}
	}
	if key, err := (domain.Policy{}).KeyOf(json.RawMessage(`{"tenant":"x"}`)); key != "" || err != nil {
		t.Errorf("a policy without a key: %q, %v", key, err)
	}
}

// TestRateLimitFold: grants are judged by their log times against the
// window; Grantable offers no more than the window allows, CheckGrant
// refuses what it would not offer, and the window slides with time.
func TestRateLimitFold(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	l.define(domain.Policy{Ref: "act", Runner: "r", MaxConcurrent: 10, RateLimit: &domain.RateLimit{Count: 2, PerSeconds: 10}})
	for _, id := range []string{"e1", "e2", "e3", "e4"} {
		l.request(id, "act", "")
	}
	q := l.qs.Get("act")
	start := l.at
	if got := ids(q.Grantable(10, start)); !slices.Equal(got, []string{"e1", "e2"}) {
		t.Fatalf("Grantable = %v, want the two the rate allows", got)
	}
	l.at = start // both grants at the same log time
	l.mustGrant("e1", "act", "")
	l.at = start
	l.mustGrant("e2", "act", "")
	if q.RateRoom(start) != 0 || q.Grantable(10, start.Add(9*time.Second)) != nil {
		t.Fatalf("room %d after two grants in the window", q.RateRoom(start))
	}
	l.at = start.Add(5 * time.Second)
	wantErr(t, "a third grant in the window", l.grant("e3", "act", ""), "rate limit")
	later := start.Add(10 * time.Second) // the window (start, start+10s] no longer holds them
	if got := ids(q.Grantable(10, later)); !slices.Equal(got, []string{"e3", "e4"}) {
		t.Fatalf("Grantable after the window = %v", got)
	}
	l.at = later
	l.mustGrant("e3", "act", "")
	if q.RateRoom(later) != 1 {
		t.Fatalf("room %d, want 1", q.RateRoom(later))
	}
	// Ends do not give rate back: the limit counts grants, not slots.
	l.end("e1", domain.ExecutionCompleted{})
	l.end("e3", domain.ExecutionCompleted{})
	if q.RateRoom(later) != 1 {
		t.Fatalf("room %d after ends, want 1", q.RateRoom(later))
	}
	// A rebuild agrees.
	rq := rebuildQueues(l.hist).Get("act")
	if rq.RateRoom(later) != 1 || rq.RateRoom(start.Add(5*time.Second)) != q.RateRoom(start.Add(5*time.Second)) {
		t.Fatal("a rebuilt fold judges the rate differently")
	}
}

func TestQueueActionChangedMovesTheFence(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	l.define(domain.Policy{Ref: "act", Runner: "r"})
	l.apply(domain.QueueStream("act"), domain.QueueActionChanged{ActionVersion: 0, Change: domain.TypeActionDefined})
	q := l.qs.Get("act")
	if q.Version() != 0 {
		t.Fatalf("queue version %d, want 0", q.Version())
	}
	l.request("e1", "act", "")
	l.mustGrant("e1", "act", "")
	l.pause("act")
	l.apply(domain.QueueStream("act"), domain.QueueActionChanged{ActionVersion: 1, Change: domain.TypeActionPaused})
	if q.Version() != 2 || !q.Paused() {
		t.Fatalf("queue version %d paused %v, want 2 and paused", q.Version(), q.Paused())
	}
}

func TestRequestChildren(t *testing.T) {
	t.Parallel()
	x, _ := execIn(t, domain.StatusRunning, true) // 3 items, window 2
	l := &execLog{t: t, x: x, ver: uint64(x.Version() + 1), at: t0}
	if _, err := x.RequestChildren(0); !errors.Is(err, domain.ErrNoMoreChildren) {
		t.Fatalf("zero children: %v", err)
	}
	if _, err := x.RequestChildren(4); !errors.Is(err, domain.ErrNoMoreChildren) {
		t.Fatalf("beyond the items: %v", err)
	}
	ev, err := x.RequestChildren(2)
	if err != nil || ev.First != 0 || ev.Count != 2 {
		t.Fatalf("RequestChildren(2) = %+v, %v", ev, err)
	}
	l.must(ev, err)
	if x.ChildrenRequested() != 2 || x.State().ChildrenAsked != 2 || x.Status() != domain.StatusRunning {
		t.Fatalf("requested %d status %s", x.ChildrenRequested(), x.Status())
	}
	if err := x.Validate(domain.ExecutionChildrenRequested{First: 0, Count: 1}, oExec, ""); err == nil {
		t.Fatal("Validate accepted children requested again")
	}
	l.must(x.RequestCancel("stop"))
	if _, err := x.RequestChildren(1); !errors.Is(err, domain.ErrNoMoreChildren) {
		t.Fatalf("after a cancellation request: %v", err)
	}
	plain, _ := execIn(t, domain.StatusRunning, false)
	if _, err := plain.RequestChildren(1); err == nil {
		t.Fatal("a plain execution requested children")
	}
}
