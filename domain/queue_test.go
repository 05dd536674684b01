package domain_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/turnstile/turnstile/domain"
)

// qlog is a hand-built log folded into a Queues: it assigns positions,
// per-stream versions and times, and keeps the history for rebuilds.
type qlog struct {
	t        fataler
	qs       *domain.Queues
	pos      uint64
	versions map[string]uint64
	at       time.Time
	hist     []qrec
}

type qrec struct {
	env domain.Envelope
	ev  domain.Event
}

// fataler is what both *testing.T and *rapid.T offer.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func newQLog(t fataler) *qlog {
	return &qlog{t: t, qs: domain.NewQueues(), pos: 1, versions: map[string]uint64{}, at: t0}
}

func (l *qlog) apply(stream string, ev domain.Event) domain.Envelope {
	v := l.versions[stream]
	l.versions[stream] = v + 1
	env := domain.Envelope{Stream: stream, Version: v, Position: l.pos, Type: ev.EventType(), SchemaVersion: 1, Time: l.at}
	l.pos++
	l.at = l.at.Add(time.Second)
	l.qs.Apply(&env, ev)
	l.hist = append(l.hist, qrec{env, ev})
	return env
}

func (l *qlog) define(p domain.Policy) {
	l.apply(domain.ActionStream(p.Ref), domain.ActionDefined{Policy: p.WithDefaults()})
}

func (l *qlog) change(p domain.Policy) {
	l.apply(domain.ActionStream(p.Ref), domain.ActionPolicyChanged{Policy: p.WithDefaults()})
}

func (l *qlog) pause(ref string)  { l.apply(domain.ActionStream(ref), domain.ActionPaused{}) }
func (l *qlog) resume(ref string) { l.apply(domain.ActionStream(ref), domain.ActionResumed{}) }

// request appends a request whose input has the field "tenant" set to key
// (no such field when key is "-"): the key of a policy with concurrency_key
// "tenant"; policies without one ignore it.
func (l *qlog) request(id, ref, key string) domain.Envelope {
	return l.apply(domain.ExecutionStream(id), domain.ExecutionRequested{Action: ref, Input: tenantInput(key)})
}

func tenantInput(key string) json.RawMessage {
	if key == "-" {
		return json.RawMessage(`{}`)
	}
	return json.RawMessage(`{"tenant":"` + key + `"}`)
}

// grant checks the grant with CheckGrant at the current log time and, if
// legal, appends what the executor appends, in its order: queue.granted (at
// that time) and execution.scheduling.
func (l *qlog) grant(id, ref, key string) error {
	q := l.qs.Get(ref)
	if q == nil {
		return fmt.Errorf("no queue %q", ref)
	}
	if err := q.CheckGrant(id, key, l.at); err != nil {
		return err
	}
	l.apply(domain.QueueStream(ref), domain.QueueGranted{Execution: id, ConcurrencyKey: key})
	l.apply(domain.ExecutionStream(id), domain.ExecutionScheduling{ConcurrencyKey: key})
	return nil
}

func (l *qlog) mustGrant(id, ref, key string) {
	l.t.Helper()
	if err := l.grant(id, ref, key); err != nil {
		l.t.Fatalf("grant %s: %v", id, err)
	}
}

func (l *qlog) end(id string, ev domain.Event) { l.apply(domain.ExecutionStream(id), ev) }

// waitingIDs lists a key queue's waiters in FIFO order (nil queue: none).
func waitingIDs(q *domain.Queue, key string) []string {
	var out []string
	if q == nil || q.Key(key) == nil {
		return out
	}
	q.Key(key).EachWaiting(func(w domain.Waiter) bool {
		out = append(out, w.Execution)
		return true
	})
	return out
}

func activeIDs(q *domain.Queue, key string) []string {
	if q == nil || q.Key(key) == nil {
		return []string{}
	}
	return q.Key(key).ActiveIDs()
}

func ids(ws []domain.Waiter) []string {
	out := []string{}
	for _, w := range ws {
		out = append(out, w.Execution)
	}
	return out
}

func wantErr(t *testing.T, what string, err error, substr string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), substr) {
		t.Errorf("%s: error %v, want one mentioning %q", what, err, substr)
	}
}

func TestQueueFIFO(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	l.define(domain.Policy{Ref: "act", Runner: "r", MaxConcurrent: 2})
	var positions []uint64
	for _, id := range []string{"e1", "e2", "e3", "e4"} {
		positions = append(positions, l.request(id, "act", "").Position)
	}
	q := l.qs.Get("act")
	if got := waitingIDs(q, ""); !slices.Equal(got, []string{"e1", "e2", "e3", "e4"}) {
		t.Fatalf("waiting %v", got)
	}
	if h, ok := q.Key("").Head(); !ok || h.Execution != "e1" || h.Position != positions[0] || !h.EnqueuedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("Head = %+v, %v", h, ok)
	}
	if q.Waiting() != 4 || q.Active() != 0 || q.Version() != -1 {
		t.Fatalf("waiting %d active %d version %d", q.Waiting(), q.Active(), q.Version())
	}
	if got := ids(q.Grantable(10, t0)); !slices.Equal(got, []string{"e1", "e2"}) {
		t.Fatalf("Grantable(10, t0) = %v, want the two oldest", got)
	}
	if got := ids(q.Grantable(1, t0)); !slices.Equal(got, []string{"e1"}) {
		t.Fatalf("Grantable(1, t0) = %v", got)
	}
	if got := q.Grantable(0, t0); got != nil {
		t.Fatalf("Grantable(0, t0) = %v", got)
	}
	wantErr(t, "e2 before e1", l.grant("e2", "act", ""), "FIFO")
	l.mustGrant("e1", "act", "")
	l.mustGrant("e2", "act", "")
	if q.Version() != 1 || q.Active() != 2 || q.Waiting() != 2 {
		t.Fatalf("after two grants: version %d active %d waiting %d", q.Version(), q.Active(), q.Waiting())
	}
	if got := q.Grantable(10, t0); len(got) != 0 {
		t.Fatalf("Grantable with no free slot = %v", got)
	}
	wantErr(t, "third grant", l.grant("e3", "act", ""), "max_concurrent")
	if ref, key, granted, ok := l.qs.Locate("e1"); !ok || !granted || ref != "act" || key != "" {
		t.Fatalf("Locate(e1) = %q %q %v %v", ref, key, granted, ok)
	}
	if _, _, granted, ok := l.qs.Locate("e3"); !ok || granted {
		t.Fatalf("Locate(e3) = granted %v ok %v", granted, ok)
	}
	l.end("e1", domain.ExecutionCompleted{})
	if _, _, _, ok := l.qs.Locate("e1"); ok {
		t.Fatal("a completed execution is still located")
	}
	if got := ids(q.Grantable(10, t0)); !slices.Equal(got, []string{"e3"}) {
		t.Fatalf("after e1 completed, Grantable = %v", got)
	}
	l.mustGrant("e3", "act", "")
	if got := activeIDs(q, ""); !slices.Equal(got, []string{"e2", "e3"}) {
		t.Fatalf("active %v", got)
	}
}

func TestQueuePauseAndUndefined(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	l.define(domain.Policy{Ref: "act", Runner: "r"})
	l.request("e1", "act", "")
	l.pause("act")
	q := l.qs.Get("act")
	if !q.Paused() || q.Grantable(5, t0) != nil {
		t.Fatalf("paused %v grantable %v", q.Paused(), q.Grantable(5, t0))
	}
	wantErr(t, "grant while paused", l.grant("e1", "act", ""), "paused")
	l.request("e2", "act", "") // requests still queue while paused
	if got := waitingIDs(q, ""); !slices.Equal(got, []string{"e1", "e2"}) {
		t.Fatalf("waiting while paused %v", got)
	}
	l.resume("act")
	if got := ids(q.Grantable(5, t0)); q.Paused() || !slices.Equal(got, []string{"e1"}) {
		t.Fatalf("after resume: paused %v grantable %v", q.Paused(), got)
	}

	// A queue whose action was never defined grants nothing.
	l.change(domain.Policy{Ref: "ghost", Runner: "r", MaxConcurrent: 5})
	g := l.qs.Get("ghost")
	if g == nil || g.Defined() || g.Grantable(5, t0) != nil {
		t.Fatalf("undefined action: queue %v", g)
	}
	wantErr(t, "grant of an undefined action", g.CheckGrant("x", "", t0), "not defined")
	// A request for an action the log never defined gets no queue at all.
	l.request("e9", "nowhere", "")
	if l.qs.Get("nowhere") != nil || slices.Contains(l.qs.Refs(), "nowhere") {
		t.Fatal("a queue was kept for an undefined action")
	}
}

func TestCheckGrant(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	l.define(domain.Policy{Ref: "act", Runner: "r", MaxConcurrent: 1, ConcurrencyKey: "tenant"})
	l.request("e1", "act", "")
	l.request("e2", "act", "")
	l.request("k1", "act", "k")
	q := l.qs.Get("act")
	tests := []struct {
		name, id, key, want string
	}{
		{"unknown execution", "zz", "", "not waiting"},
		{"unknown key", "e1", "nokey", "not waiting"},
		{"waiting under another key", "k1", "", "not waiting"},
		{"behind the head", "e2", "", "FIFO"},
	}
	for _, tc := range tests {
		wantErr(t, tc.name, q.CheckGrant(tc.id, tc.key, t0), tc.want)
	}
	if err := q.CheckGrant("e1", "", t0); err != nil {
		t.Fatalf("CheckGrant of the head: %v", err)
	}
	l.mustGrant("e1", "act", "")
	wantErr(t, "already active", q.CheckGrant("e1", "", t0), "not waiting")
	wantErr(t, "over the limit", q.CheckGrant("e2", "", t0), "max_concurrent")
	if err := q.CheckGrant("k1", "k", t0); err != nil {
		t.Fatalf("another key has its own slot: %v", err)
	}
	// Raising the limit frees a slot for the next grant; lowering it does not
	// take slots back but stops further grants.
	l.change(domain.Policy{Ref: "act", Runner: "r", MaxConcurrent: 2, ConcurrencyKey: "tenant"})
	if err := q.CheckGrant("e2", "", t0); err != nil {
		t.Fatalf("after raising max_concurrent: %v", err)
	}
	l.mustGrant("e2", "act", "")
	l.request("e3", "act", "")
	l.change(domain.Policy{Ref: "act", Runner: "r", MaxConcurrent: 1, ConcurrencyKey: "tenant"})
	if q.Key("").Active() != 2 {
		t.Fatalf("lowering the limit changed the active set: %v", activeIDs(q, ""))
	}
	wantErr(t, "over a lowered limit", q.CheckGrant("e3", "", t0), "max_concurrent")
	l.end("e1", domain.ExecutionCompleted{})
	wantErr(t, "still at the lowered limit", q.CheckGrant("e3", "", t0), "max_concurrent")
	l.end("e2", domain.ExecutionFailed{})
	if err := q.CheckGrant("e3", "", t0); err != nil {
		t.Fatalf("below the lowered limit: %v", err)
	}
}

func TestQueueTerminalEvents(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	l.define(domain.Policy{Ref: "act", Runner: "r", MaxConcurrent: 1})
	for i := 1; i <= 6; i++ {
		l.request(fmt.Sprintf("e%d", i), "act", "")
	}
	q := l.qs.Get("act")
	l.mustGrant("e1", "act", "")
	l.end("e3", domain.ExecutionCancelled{Reason: "client"}) // from the middle
	l.end("e5", domain.ExecutionRejected{Code: domain.RejectRateLimited})
	if got := waitingIDs(q, ""); !slices.Equal(got, []string{"e2", "e4", "e6"}) {
		t.Fatalf("after removing from the middle: %v", got)
	}
	l.end("e2", domain.ExecutionCancelled{}) // the head
	if h, _ := q.Key("").Head(); h.Execution != "e4" {
		t.Fatalf("head %q after the head was cancelled", h.Execution)
	}
	l.end("e1", domain.ExecutionTimedOut{})
	if q.Active() != 0 {
		t.Fatalf("timed_out did not free the slot: %v", activeIDs(q, ""))
	}
	l.mustGrant("e4", "act", "")
	l.end("e4", domain.ExecutionFailed{Error: "x"})
	l.mustGrant("e6", "act", "")
	l.end("e6", domain.ExecutionCancelled{})
	if q.Active() != 0 || q.Waiting() != 0 {
		t.Fatalf("active %d waiting %d after everything ended", q.Active(), q.Waiting())
	}
	// Ends the fold knows nothing of, and repeated ends, change nothing.
	before := snapshotQueues(l.qs)
	l.end("e6", domain.ExecutionCompleted{})
	l.end("stranger", domain.ExecutionCancelled{})
	if after := snapshotQueues(l.qs); !reflect.DeepEqual(before, after) {
		t.Fatalf("an unknown end changed the fold:\n%+v\n%+v", before, after)
	}
	// Events that are not queue-related leave it alone too.
	l.apply(domain.ExecutionStream("e7"), domain.ExecutionCancelRequested{})
	l.apply(domain.WorkerStream("w1"), domain.WorkerHeartbeat{})
	if after := snapshotQueues(l.qs); !reflect.DeepEqual(before, after) {
		t.Fatal("an unrelated event changed the fold")
	}
}

func TestAdmissionRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy domain.Policy
		setup  func(l *qlog)
		req    domain.ExecutionRequested
		code   string
	}{
		{
			name: "unknown action", policy: domain.Policy{Ref: "act", Runner: "r"},
			req: domain.ExecutionRequested{Action: "other"}, code: domain.RejectUnknownAction,
		},
		{
			name: "queue full", policy: domain.Policy{Ref: "act", Runner: "r", MaxQueueLength: 2},
			setup: func(l *qlog) { l.request("a", "act", ""); l.request("b", "act", "") },
			req:   domain.ExecutionRequested{Action: "act"}, code: domain.RejectQueueFull,
		},
		{
			name: "queue full counts waiters, not active ones", policy: domain.Policy{Ref: "act", Runner: "r", MaxQueueLength: 1, MaxConcurrent: 2},
			setup: func(l *qlog) { l.request("a", "act", ""); l.mustGrant("a", "act", ""); l.request("b", "act", "") },
			req:   domain.ExecutionRequested{Action: "act"}, code: domain.RejectQueueFull,
		},
		{
			name: "on_limit reject, slot taken", policy: domain.Policy{Ref: "act", Runner: "r", OnLimit: domain.OnLimitReject},
			setup: func(l *qlog) { l.request("a", "act", ""); l.mustGrant("a", "act", "") },
			req:   domain.ExecutionRequested{Action: "act"}, code: domain.RejectNoSlot,
		},
		{
			name: "on_limit reject, slot promised to a waiter", policy: domain.Policy{Ref: "act", Runner: "r", OnLimit: domain.OnLimitReject},
			setup: func(l *qlog) { l.request("a", "act", "") },
			req:   domain.ExecutionRequested{Action: "act"}, code: domain.RejectNoSlot,
		},
		{
			name: "on_limit reject while paused", policy: domain.Policy{Ref: "act", Runner: "r", OnLimit: domain.OnLimitReject, MaxConcurrent: 5},
			setup: func(l *qlog) { l.pause("act") },
			req:   domain.ExecutionRequested{Action: "act"}, code: domain.RejectNoSlot,
		},
		{
			name: "invalid input", policy: domain.Policy{Ref: "act", Runner: "r"},
			req: domain.ExecutionRequested{Action: "act", Input: json.RawMessage(`[1,2]`)}, code: domain.RejectInvalidInput,
		},
		{
			name: "oversized input", policy: domain.Policy{Ref: "act", Runner: "r"},
			req:  domain.ExecutionRequested{Action: "act", Input: json.RawMessage(`{"k":"` + strings.Repeat("x", domain.MaxInputBytes) + `"}`)},
			code: domain.RejectInvalidInput,
		},
		{
			name: "on_limit reject with a free slot", policy: domain.Policy{Ref: "act", Runner: "r", OnLimit: domain.OnLimitReject, MaxConcurrent: 2},
			setup: func(l *qlog) { l.request("a", "act", "") },
			req:   domain.ExecutionRequested{Action: "act"}, code: "",
		},
		{
			name: "on_limit queue with no free slot", policy: domain.Policy{Ref: "act", Runner: "r"},
			setup: func(l *qlog) { l.request("a", "act", ""); l.mustGrant("a", "act", "") },
			req:   domain.ExecutionRequested{Action: "act"}, code: "",
		},
		{
			name: "full queue of another key", policy: domain.Policy{Ref: "act", Runner: "r", MaxQueueLength: 1, OnLimit: domain.OnLimitReject, ConcurrencyKey: "tenant"},
			setup: func(l *qlog) { l.request("a", "act", "k1") },
			req:   domain.ExecutionRequested{Action: "act", Input: tenantInput("k2")}, code: "",
		},
		{
			name: "no key field", policy: domain.Policy{Ref: "act", Runner: "r", ConcurrencyKey: "tenant"},
			req: domain.ExecutionRequested{Action: "act", Input: json.RawMessage(`{"other":1}`)}, code: domain.RejectInvalidInput,
		},
		{
			name: "null key field", policy: domain.Policy{Ref: "act", Runner: "r", ConcurrencyKey: "tenant"},
			req: domain.ExecutionRequested{Action: "act", Input: json.RawMessage(`{"tenant":null}`)}, code: domain.RejectInvalidInput,
		},
		{
			name: "object key field", policy: domain.Policy{Ref: "act", Runner: "r", ConcurrencyKey: "tenant"},
			req: domain.ExecutionRequested{Action: "act", Input: json.RawMessage(`{"tenant":{"a":1}}`)}, code: domain.RejectInvalidInput,
		},
		{
			name: "rate limit reached, on_limit reject", policy: domain.Policy{Ref: "act", Runner: "r", OnLimit: domain.OnLimitReject, MaxConcurrent: 5, RateLimit: &domain.RateLimit{Count: 1, PerSeconds: 60}},
			setup: func(l *qlog) { l.request("a", "act", ""); l.mustGrant("a", "act", "") },
			req:   domain.ExecutionRequested{Action: "act"}, code: domain.RejectRateLimited,
		},
		{
			name: "rate limit promised to a waiter, on_limit reject", policy: domain.Policy{Ref: "act", Runner: "r", OnLimit: domain.OnLimitReject, MaxConcurrent: 5, RateLimit: &domain.RateLimit{Count: 1, PerSeconds: 60}},
			setup: func(l *qlog) { l.request("a", "act", "") },
			req:   domain.ExecutionRequested{Action: "act"}, code: domain.RejectRateLimited,
		},
		{
			name: "rate limit reached, on_limit queue", policy: domain.Policy{Ref: "act", Runner: "r", MaxConcurrent: 5, RateLimit: &domain.RateLimit{Count: 1, PerSeconds: 60}},
			setup: func(l *qlog) { l.request("a", "act", ""); l.mustGrant("a", "act", "") },
			req:   domain.ExecutionRequested{Action: "act"}, code: "",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newQLog(t)
			l.define(tc.policy)
			if tc.setup != nil {
				tc.setup(l)
			}
			// The API's early refusal agrees with the fold's admission.
			if q := l.qs.Get(tc.req.Action); q != nil && q.Defined() && tc.code != domain.RejectInvalidInput {
				key, err := q.Policy().KeyOf(tc.req.Input)
				if err != nil {
					t.Fatal(err)
				}
				if code, reason, _ := q.Refusal(key, l.at); code != tc.code || (code != "") != (reason != "") {
					t.Fatalf("Refusal = %q (%s), want %q", code, reason, tc.code)
				}
			}
			before := l.qs.PendingRejections()
			l.apply(domain.ExecutionStream("x"), tc.req)
			pending := l.qs.PendingRejections()
			_, _, _, located := l.qs.Locate("x")
			if tc.code == "" {
				if len(pending) != len(before) || !located {
					t.Fatalf("admission refused: pending %v, located %v", pending, located)
				}
				return
			}
			if located || len(pending) != len(before)+1 {
				t.Fatalf("refusal not recorded: pending %v, located %v", pending, located)
			}
			i := slices.IndexFunc(pending, func(r domain.Rejection) bool { return r.Execution == "x" })
			if i < 0 || pending[i].Code != tc.code || pending[i].Action != tc.req.Action || pending[i].Reason == "" {
				t.Fatalf("PendingRejections = %+v, want code %q for x", pending, tc.code)
			}
			if q := l.qs.Get(tc.req.Action); q != nil {
				for _, k := range q.Keys() {
					if got := waitingIDs(q, k); slices.Contains(got, "x") {
						t.Fatalf("refused request waits in key %q: %v", k, got)
					}
				}
			}
			l.end("x", domain.ExecutionRejected{Code: tc.code, Reason: pending[i].Reason})
			if got := l.qs.PendingRejections(); len(got) != len(before) {
				t.Fatalf("after execution.rejected, pending %+v", got)
			}
		})
	}
}

// TestRefusalRetryAfter: a rate-limited refusal says when room comes back:
// when enough grants have left the window for the waiters and one more.
func TestRefusalRetryAfter(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	l.define(domain.Policy{Ref: "act", Runner: "r", OnLimit: domain.OnLimitReject, MaxConcurrent: 10, RateLimit: &domain.RateLimit{Count: 2, PerSeconds: 60}})
	l.request("a", "act", "")
	grantA := l.at
	l.mustGrant("a", "act", "")
	q := l.qs.Get("act")
	if code, _, _ := q.Refusal("", l.at); code != "" {
		t.Fatalf("one grant of two in the window: refused %q", code)
	}
	l.request("b", "act", "") // waits: the window's last grant is promised to it
	code, _, after := q.Refusal("", l.at)
	if code != domain.RejectRateLimited || after != grantA.Add(time.Minute).Sub(l.at) {
		t.Fatalf("Refusal = %q after %s, want %q after %s", code, after, domain.RejectRateLimited, grantA.Add(time.Minute).Sub(l.at))
	}
	l.mustGrant("b", "act", "")
	if _, _, after = q.Refusal("", l.at); after != grantA.Add(time.Minute).Sub(l.at) {
		t.Fatalf("two grants in the window: retry after %s, want %s", after, grantA.Add(time.Minute).Sub(l.at))
	}
	if code, _, _ := q.Refusal("", grantA.Add(time.Minute+time.Millisecond)); code != "" {
		t.Fatalf("after a's grant left the window: refused %q", code)
	}
	// A caller whose clock reads a moment before the grant's log time (the
	// API reads its clock, then the executor logs a grant) waits one window
	// at most, never more.
	if _, _, after = q.Refusal("", grantA.Add(-time.Millisecond)); after != time.Minute {
		t.Fatalf("clock before the grant: retry after %s, want at most the window (1m)", after)
	}
}

func TestPendingRejectionsSortedAndCleared(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	for _, id := range []string{"c", "a", "b"} {
		l.request(id, "undefined", "")
	}
	if got := l.qs.PendingRejections(); len(got) != 3 || got[0].Execution != "a" || got[1].Execution != "b" || got[2].Execution != "c" {
		t.Fatalf("PendingRejections = %+v, want sorted by id", got)
	}
	// The executor may also end a refused request by cancelling it.
	l.end("b", domain.ExecutionCancelled{})
	l.end("a", domain.ExecutionRejected{})
	if got := l.qs.PendingRejections(); len(got) != 1 || got[0].Execution != "c" {
		t.Fatalf("PendingRejections = %+v, want only c", got)
	}
}

func TestWithItemsParentTakesNoSlot(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	l.define(domain.Policy{Ref: "act", Runner: "r"})
	l.apply(domain.ExecutionStream("parent"), domain.ExecutionRequested{Action: "act", Items: 3, Concurrency: 2})
	l.apply(domain.ExecutionStream("orphan"), domain.ExecutionRequested{Action: "undefined", Items: 3})
	if q := l.qs.Get("act"); q.Waiting() != 0 || q.Active() != 0 {
		t.Fatalf("a parent queued: waiting %d active %d", q.Waiting(), q.Active())
	}
	if _, _, _, ok := l.qs.Locate("parent"); ok || len(l.qs.PendingRejections()) != 0 {
		t.Fatal("a with_items parent was placed or refused by the queue fold")
	}
	l.apply(domain.ExecutionStream("child-0"), domain.ExecutionRequested{Action: "act", Parent: "parent", ItemIndex: 0})
	if got := waitingIDs(l.qs.Get("act"), ""); !slices.Equal(got, []string{"child-0"}) {
		t.Fatalf("children queue like any request: %v", got)
	}
}

func TestConcurrencyKeys(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	l.define(domain.Policy{Ref: "act", Runner: "r", MaxConcurrent: 1, ConcurrencyKey: "tenant"})
	l.request("a1", "act", "A")
	l.request("b1", "act", "B")
	l.request("a2", "act", "A")
	l.request("b2", "act", "B")
	q := l.qs.Get("act")
	if got := q.Keys(); !slices.Equal(got, []string{"A", "B"}) {
		t.Fatalf("Keys() = %v", got)
	}
	if got := ids(q.Grantable(10, t0)); !slices.Equal(got, []string{"a1", "b1"}) {
		t.Fatalf("Grantable = %v, want each key's head", got)
	}
	l.mustGrant("a1", "act", "A")
	if got := ids(q.Grantable(10, t0)); !slices.Equal(got, []string{"b1"}) {
		t.Fatalf("a grant in A took B's slot: %v", got)
	}
	wantErr(t, "a2 while A is full", l.grant("a2", "act", "A"), "max_concurrent")
	l.mustGrant("b1", "act", "B")
	if q.Key("A").Active() != 1 || q.Key("B").Active() != 1 || q.Active() != 2 || q.Waiting() != 2 {
		t.Fatalf("active A %d B %d", q.Key("A").Active(), q.Key("B").Active())
	}
	if _, key, _, _ := l.qs.Locate("b1"); key != "B" {
		t.Fatalf("Locate(b1) key %q", key)
	}
	l.end("a1", domain.ExecutionCompleted{})
	if got := ids(q.Grantable(10, t0)); !slices.Equal(got, []string{"a2"}) {
		t.Fatalf("after a1 ended: %v", got)
	}
	// A key whose queue is empty and idle is dropped, the others stay.
	l.end("b1", domain.ExecutionCompleted{})
	l.end("b2", domain.ExecutionCancelled{})
	if q.Key("B") != nil || !slices.Equal(q.Keys(), []string{"A"}) {
		t.Fatalf("idle key B kept: %v", q.Keys())
	}
	l.request("b3", "act", "B")
	if got := waitingIDs(q, "B"); !slices.Equal(got, []string{"b3"}) {
		t.Fatalf("key B after coming back: %v", got)
	}
}

// TestGrantableOldestFirstAcrossKeys: when max cuts the list, the oldest
// waiters (by log position) win, whatever the keys, every time.
func TestGrantableOldestFirstAcrossKeys(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	l.define(domain.Policy{Ref: "act", Runner: "r", MaxConcurrent: 2, ConcurrencyKey: "tenant"})
	var all []string
	for i := range 12 {
		id := fmt.Sprintf("e%02d", i)
		all = append(all, id)
		l.request(id, "act", fmt.Sprintf("k%d", i%6))
	}
	q := l.qs.Get("act")
	for range 50 { // map iteration order varies from call to call
		for _, max := range []int{1, 3, 6, 12, 20} {
			want := all[:min(max, len(all))]
			if got := ids(q.Grantable(max, t0)); !slices.Equal(got, want) {
				t.Fatalf("Grantable(%d, t0) = %v, want %v", max, got, want)
			}
		}
	}
}

func TestQueueTimedOut(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	l.define(domain.Policy{Ref: "act", Runner: "r", QueueTimeoutSeconds: 10, MaxConcurrent: 1})
	l.define(domain.Policy{Ref: "forever", Runner: "r"})
	at := func(d time.Duration) { l.at = t0.Add(d) }
	at(0)
	l.request("e1", "act", "")
	at(2 * time.Second)
	l.request("f1", "forever", "")
	at(5 * time.Second)
	l.request("k1", "act", "k") // another key, in between
	at(6 * time.Second)
	l.request("e2", "act", "")
	at(20 * time.Second)
	l.request("e3", "act", "")
	q := l.qs.Get("act")
	tests := []struct {
		now  time.Duration
		max  int
		want []string
	}{
		{9 * time.Second, 10, []string{}},
		{10 * time.Second, 10, []string{"e1"}},
		{16 * time.Second, 10, []string{"e1", "k1", "e2"}},
		{16 * time.Second, 2, []string{"e1", "k1"}},
		{16 * time.Second, 1, []string{"e1"}},
		{16 * time.Second, 0, []string{}},
		{16 * time.Second, -1, []string{}},
		{time.Hour, 10, []string{"e1", "k1", "e2", "e3"}},
	}
	for range 20 { // map iteration order varies from call to call
		for _, tc := range tests {
			if got := ids(q.TimedOut(t0.Add(tc.now), tc.max)); !slices.Equal(got, tc.want) {
				t.Fatalf("TimedOut(+%v, %d) = %v, want %v (oldest first)", tc.now, tc.max, got, tc.want)
			}
		}
	}
	// Active executions do not time out in the queue; no queue timeout, no
	// timeouts.
	l.mustGrant("e1", "act", "")
	if got := ids(q.TimedOut(t0.Add(time.Hour), 10)); !slices.Equal(got, []string{"k1", "e2", "e3"}) {
		t.Fatalf("after e1 was granted: %v", got)
	}
	if got := l.qs.Get("forever").TimedOut(t0.Add(1000*time.Hour), 10); got != nil {
		t.Fatalf("TimedOut without a queue timeout = %v", got)
	}
}

// TestFifoCompaction pushes and removes more than 2048 waiters, from the
// head and from the middle, so that the queue compacts its storage, and
// checks the order, the head and removals by id afterwards.
func TestFifoCompaction(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	l.define(domain.Policy{Ref: "act", Runner: "r", MaxConcurrent: 1, MaxQueueLength: 100_000})
	var model []string
	remove := func(id string) {
		i := slices.Index(model, id)
		if i < 0 {
			t.Fatalf("model has no %s", id)
		}
		model = slices.Delete(model, i, i+1)
	}
	push := func(from, to int) {
		for i := from; i < to; i++ {
			id := fmt.Sprintf("e%05d", i)
			l.request(id, "act", "")
			model = append(model, id)
		}
	}
	q := l.qs.Get("act")
	check := func(stage string) {
		t.Helper()
		got := waitingIDs(q, "")
		if !slices.Equal(got, model) {
			t.Fatalf("%s: %d waiting, model %d; first difference at %d", stage, len(got), len(model), firstDiff(got, model))
		}
		if q.Waiting() != len(model) {
			t.Fatalf("%s: Waiting() = %d, want %d", stage, q.Waiting(), len(model))
		}
		if len(model) > 0 {
			if h, ok := q.Key("").Head(); !ok || h.Execution != model[0] {
				t.Fatalf("%s: head %q, want %q", stage, h.Execution, model[0])
			}
		}
	}
	push(0, 3000)
	// Tombstones in the middle that the compaction must carry along.
	for i := 1700; i < 3000; i += 3 {
		id := fmt.Sprintf("e%05d", i)
		l.end(id, domain.ExecutionCancelled{})
		remove(id)
	}
	check("middle removed")
	// Advance the head past 1024 (and past half the storage): grants and
	// cancellations of the head.
	for len(model) > 0 && model[0] < "e01600" {
		id := model[0]
		if id[len(id)-1]%2 == 0 {
			l.mustGrant(id, "act", "")
			l.end(id, domain.ExecutionCompleted{})
		} else {
			l.end(id, domain.ExecutionCancelled{})
		}
		remove(id)
	}
	check("head advanced")
	// Removals by id after the compaction re-indexed the survivors.
	for _, i := range []int{1601, 2000, 2501, 2999} {
		id := fmt.Sprintf("e%05d", i)
		if !slices.Contains(model, id) {
			continue
		}
		l.end(id, domain.ExecutionCancelled{})
		remove(id)
	}
	push(3000, 3600)
	check("after compaction")
	wantErr(t, "second waiter", q.CheckGrant(model[1], "", t0), "FIFO")
	if err := q.CheckGrant(model[0], "", t0); err != nil {
		t.Fatalf("head after compaction: %v", err)
	}
	// Drain completely, from the tail, then reuse.
	for len(model) > 0 {
		id := model[len(model)-1]
		l.end(id, domain.ExecutionCancelled{})
		remove(id)
	}
	check("drained")
	if _, ok := q.Key("").Head(); ok {
		t.Fatal("Head of an empty queue")
	}
	push(4000, 4003)
	check("reused")
	// And the whole history folds to the same state again.
	if a, b := snapshotQueues(l.qs), snapshotQueues(rebuildQueues(l.hist)); !reflect.DeepEqual(a, b) {
		t.Fatal("rebuild differs after compaction")
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestTakeChanged(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	l.define(domain.Policy{Ref: "b", Runner: "r"})
	l.define(domain.Policy{Ref: "a", Runner: "r"})
	if got := l.qs.TakeChanged(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("TakeChanged = %v", got)
	}
	if got := l.qs.TakeChanged(); len(got) != 0 {
		t.Fatalf("second TakeChanged = %v", got)
	}
	l.request("e1", "b", "")
	l.request("e2", "undefined", "")
	if got := l.qs.TakeChanged(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("TakeChanged after a request = %v", got)
	}
	if got := l.qs.Refs(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Refs = %v", got)
	}
}

// ---- snapshots and rebuilds ----

type keySnap struct {
	Waiting []domain.Waiter
	Active  []string
	Head    domain.Waiter
}

type refSnap struct {
	Defined, Paused bool
	Version         int64
	Policy          domain.Policy
	Keys            map[string]keySnap
	Grantable       []domain.Waiter
	Waiting, Active int
}

type queuesSnap struct {
	Refs    []string
	Queues  map[string]refSnap
	Pending []domain.Rejection
}

func snapshotQueues(qs *domain.Queues) queuesSnap {
	s := queuesSnap{Refs: qs.Refs(), Queues: map[string]refSnap{}, Pending: qs.PendingRejections()}
	for _, ref := range qs.Refs() {
		q := qs.Get(ref)
		r := refSnap{
			Defined: q.Defined(), Paused: q.Paused(), Version: q.Version(), Policy: q.Policy(),
			Keys: map[string]keySnap{}, Grantable: q.Grantable(1<<20, t0), Waiting: q.Waiting(), Active: q.Active(),
		}
		for _, k := range q.Keys() {
			kq := q.Key(k)
			ks := keySnap{Active: kq.ActiveIDs()}
			kq.EachWaiting(func(w domain.Waiter) bool {
				ks.Waiting = append(ks.Waiting, w)
				return true
			})
			ks.Head, _ = kq.Head()
			r.Keys[k] = ks
		}
		s.Queues[ref] = r
	}
	return s
}

func rebuildQueues(hist []qrec) *domain.Queues {
	qs := domain.NewQueues()
	for i := range hist {
		env := hist[i].env
		qs.Apply(&env, hist[i].ev)
	}
	return qs
}

// ---- the property test ----

type qKey struct{ ref, key string }

// queueModel is the test's own account of the queues, from DESIGN.md:
// FIFO by request order, admission by policy, slots freed by terminal events.
type queueModel struct {
	policy  map[string]domain.Policy
	paused  map[string]bool
	waiting map[qKey][]string
	active  map[qKey]map[string]bool
	where   map[string]qKey
	pending map[string]string // execution → rejection code
}

func (m *queueModel) admit(id, tenant string, r domain.ExecutionRequested) {
	p, defined := m.policy[r.Action]
	k := qKey{r.Action, ""}
	if p.ConcurrencyKey != "" {
		k.key = tenant
	}
	switch {
	case !defined:
		m.pending[id] = domain.RejectUnknownAction
	case domain.ValidateInput(r.Input) != nil:
		m.pending[id] = domain.RejectInvalidInput
	case p.ConcurrencyKey != "" && tenant == "-":
		m.pending[id] = domain.RejectInvalidInput // no key field in the input
	case len(m.waiting[k]) >= p.MaxQueueLength:
		m.pending[id] = domain.RejectQueueFull
	case p.OnLimit == domain.OnLimitReject && (len(m.active[k])+len(m.waiting[k]) >= p.MaxConcurrent || m.paused[r.Action]):
		m.pending[id] = domain.RejectNoSlot
	default:
		m.waiting[k] = append(m.waiting[k], id)
		m.where[id] = k
	}
}

func (m *queueModel) end(id string) {
	delete(m.pending, id)
	k, ok := m.where[id]
	if !ok {
		return
	}
	delete(m.where, id)
	if m.active[k][id] {
		delete(m.active[k], id)
		return
	}
	m.waiting[k] = slices.DeleteFunc(m.waiting[k], func(s string) bool { return s == id })
}

// TestQueuesProperties: random requests, grants chosen only through
// Grantable, ends, policy changes, pauses and resumes. After every step the
// fold must agree with the model, every grant must have been legal
// (CheckGrant) and in request order, and a fold rebuilt from the whole
// history must be identical.
func TestQueuesProperties(t *testing.T) {
	t.Parallel()
	refs := []string{"a", "b", "c"}
	rapid.Check(t, func(t *rapid.T) {
		l := newQLog(t)
		m := &queueModel{
			policy: map[string]domain.Policy{}, paused: map[string]bool{}, waiting: map[qKey][]string{},
			active: map[qKey]map[string]bool{}, where: map[string]qKey{}, pending: map[string]string{},
		}
		genPolicy := func(t *rapid.T, ref string) domain.Policy {
			return domain.Policy{
				Ref: ref, Runner: "r",
				MaxConcurrent:  rapid.IntRange(1, 4).Draw(t, "max_concurrent"),
				MaxQueueLength: rapid.IntRange(1, 6).Draw(t, "max_queue_length"),
				OnLimit:        rapid.SampledFrom([]string{domain.OnLimitQueue, domain.OnLimitQueue, domain.OnLimitReject}).Draw(t, "on_limit"),
				ConcurrencyKey: rapid.SampledFrom([]string{"", "tenant"}).Draw(t, "concurrency_key"),
			}.WithDefaults()
		}
		// Two actions defined up front, the third maybe later.
		for _, ref := range refs[:2] {
			p := genPolicy(t, ref)
			l.define(p)
			m.policy[ref] = p
		}
		nextID := 0
		var ended []string

		t.Repeat(map[string]func(*rapid.T){
			"request": func(t *rapid.T) {
				id := fmt.Sprintf("x%03d", nextID)
				nextID++
				tenant := rapid.SampledFrom([]string{"", "", "k1", "k2", "-"}).Draw(t, "key")
				r := domain.ExecutionRequested{
					Action: rapid.SampledFrom(append(refs, "ghost")).Draw(t, "ref"),
					Input:  tenantInput(tenant),
				}
				if rapid.IntRange(0, 9).Draw(t, "bad_input") == 0 {
					r.Input = json.RawMessage(`[]`)
				}
				l.apply(domain.ExecutionStream(id), r)
				m.admit(id, tenant, r)
			},
			"grant": func(t *rapid.T) {
				ref := rapid.SampledFrom(refs).Draw(t, "ref")
				q := l.qs.Get(ref)
				if q == nil {
					t.Skip("no queue")
				}
				g := q.Grantable(rapid.IntRange(1, 6).Draw(t, "max"), l.at)
				if len(g) == 0 {
					t.Skip("nothing grantable")
				}
				// The executor grants a prefix of the list, in its order.
				n := rapid.IntRange(1, len(g)).Draw(t, "grant_n")
				for _, w := range g[:n] {
					k := qKey{ref, w.Key}
					p := m.policy[ref]
					switch {
					case m.paused[ref]:
						t.Fatalf("Grantable offered %s while %s is paused", w.Execution, ref)
					case len(m.waiting[k]) == 0 || m.waiting[k][0] != w.Execution:
						t.Fatalf("Grantable offered %s, the head of %v is %v", w.Execution, k, m.waiting[k])
					case len(m.active[k]) >= p.MaxConcurrent:
						t.Fatalf("Grantable offered %s with %d active, max_concurrent %d", w.Execution, len(m.active[k]), p.MaxConcurrent)
					}
					if err := q.CheckGrant(w.Execution, w.Key, t0); err != nil {
						t.Fatalf("CheckGrant of what Grantable offered: %v", err)
					}
					l.mustGrant(w.Execution, ref, w.Key)
					m.waiting[k] = m.waiting[k][1:]
					if m.active[k] == nil {
						m.active[k] = map[string]bool{}
					}
					m.active[k][w.Execution] = true
					m.where[w.Execution] = k
					if q.Key(w.Key).Active() > p.MaxConcurrent {
						t.Fatalf("after granting %s: %d active in %v, max_concurrent %d", w.Execution, q.Key(w.Key).Active(), k, p.MaxConcurrent)
					}
				}
			},
			"end active": func(t *rapid.T) {
				var live []string
				for id, k := range m.where {
					if m.active[k][id] {
						live = append(live, id)
					}
				}
				if len(live) == 0 {
					t.Skip("none active")
				}
				slices.Sort(live)
				id := rapid.SampledFrom(live).Draw(t, "id")
				ev := rapid.SampledFrom([]domain.Event{
					domain.ExecutionCompleted{}, domain.ExecutionFailed{}, domain.ExecutionTimedOut{}, domain.ExecutionCancelled{},
				}).Draw(t, "end")
				l.end(id, ev)
				m.end(id)
				ended = append(ended, id)
			},
			"end waiting": func(t *rapid.T) {
				var live []string
				for id, k := range m.where {
					if !m.active[k][id] {
						live = append(live, id)
					}
				}
				if len(live) == 0 {
					t.Skip("none waiting")
				}
				slices.Sort(live)
				id := rapid.SampledFrom(live).Draw(t, "id")
				ev := rapid.SampledFrom([]domain.Event{domain.ExecutionCancelled{Reason: "queue timeout"}, domain.ExecutionRejected{}}).Draw(t, "end")
				l.end(id, ev)
				m.end(id)
				ended = append(ended, id)
			},
			"reject pending": func(t *rapid.T) {
				if len(m.pending) == 0 {
					t.Skip("none pending")
				}
				id := rapid.SampledFrom(slices.Sorted(mapKeys(m.pending))).Draw(t, "id")
				l.end(id, domain.ExecutionRejected{Code: m.pending[id]})
				m.end(id)
				ended = append(ended, id)
			},
			"late end": func(t *rapid.T) {
				// A duplicate or late terminal event of an execution that has
				// already left the queue changes nothing.
				if len(ended) == 0 {
					t.Skip("nothing ended")
				}
				id := rapid.SampledFrom(ended).Draw(t, "id")
				l.end(id, domain.ExecutionCompleted{})
				m.end(id)
			},
			"define": func(t *rapid.T) {
				if _, ok := m.policy["c"]; ok {
					t.Skip("c is defined")
				}
				p := genPolicy(t, "c")
				l.define(p)
				m.policy["c"] = p
			},
			"change policy": func(t *rapid.T) {
				ref := rapid.SampledFrom(refs[:2]).Draw(t, "ref")
				p := genPolicy(t, ref)
				l.change(p)
				m.policy[ref] = p
			},
			"pause": func(t *rapid.T) {
				ref := rapid.SampledFrom(refs[:2]).Draw(t, "ref")
				l.pause(ref)
				m.paused[ref] = true
			},
			"resume": func(t *rapid.T) {
				ref := rapid.SampledFrom(refs[:2]).Draw(t, "ref")
				l.resume(ref)
				m.paused[ref] = false
			},
			"": func(t *rapid.T) {
				checkQueuesAgainstModel(t, l.qs, m)
				if a, b := snapshotQueues(l.qs), snapshotQueues(rebuildQueues(l.hist)); !reflect.DeepEqual(a, b) {
					t.Fatalf("a rebuild from the history differs from the live fold:\n live %+v\n rebuilt %+v", a, b)
				}
			},
		})
	})
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func checkQueuesAgainstModel(t *rapid.T, qs *domain.Queues, m *queueModel) {
	seen := map[qKey]bool{}
	for k := range m.waiting {
		seen[k] = true
	}
	for k := range m.active {
		seen[k] = true
	}
	for k := range seen {
		q := qs.Get(k.ref)
		want := m.waiting[k]
		if got := waitingIDs(q, k.key); !slices.Equal(got, want) && (len(got) != 0 || len(want) != 0) {
			t.Fatalf("waiting in %v: %v, model %v", k, got, want)
		}
		wantActive := slices.Sorted(mapKeys(m.active[k]))
		if got := activeIDs(q, k.key); !slices.Equal(got, wantActive) && (len(got) != 0 || len(wantActive) != 0) {
			t.Fatalf("active in %v: %v, model %v", k, got, wantActive)
		}
		// Liveness: a head with a free slot in a running, defined action
		// is offered.
		p, defined := m.policy[k.ref]
		if defined && !m.paused[k.ref] && len(want) > 0 && len(m.active[k]) < p.MaxConcurrent {
			if !slices.ContainsFunc(q.Grantable(1<<20, t0), func(w domain.Waiter) bool { return w.Execution == want[0] }) {
				t.Fatalf("head %s of %v has a free slot but is not grantable", want[0], k)
			}
		}
	}
	for _, ref := range qs.Refs() {
		q := qs.Get(ref)
		if q.Paused() != m.paused[ref] {
			t.Fatalf("%s paused %v, model %v", ref, q.Paused(), m.paused[ref])
		}
		if p, ok := m.policy[ref]; ok != q.Defined() || !reflect.DeepEqual(p, q.Policy()) && ok {
			t.Fatalf("%s policy %+v defined %v, model %+v %v", ref, q.Policy(), q.Defined(), p, ok)
		}
		for _, key := range q.Keys() {
			// A refused request may leave an empty queue for its key.
			if kq := q.Key(key); !seen[qKey{ref, key}] && (kq.Waiting() != 0 || kq.Active() != 0) {
				t.Fatalf("%s has a non-empty queue for key %q the model never used", ref, key)
			}
		}
	}
	pending := qs.PendingRejections()
	if len(pending) != len(m.pending) {
		t.Fatalf("pending %+v, model %v", pending, m.pending)
	}
	for _, r := range pending {
		if m.pending[r.Execution] != r.Code {
			t.Fatalf("pending %+v, model says %q", r, m.pending[r.Execution])
		}
	}
	for id, k := range m.where {
		ref, key, granted, ok := qs.Locate(id)
		if !ok || ref != k.ref || key != k.key || granted != m.active[k][id] {
			t.Fatalf("Locate(%s) = %q %q %v %v, model %v active %v", id, ref, key, granted, ok, k, m.active[k][id])
		}
	}
}
