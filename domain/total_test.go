package domain_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/domain"
)

// TestTotalLimitRoundRobin: with max_concurrent_total, free slots go to the
// key values with eligible waiters in turn (sorted, from after the last
// grant), one per value and turn, never more than the total running.
// Catches: the total limit ignored (Grantable returns more than free
// total slots; CheckGrant allows a grant over it); grants in request order
// instead of in turn; the round not resuming after the last grant (a fold
// that forgets LastKey, also across a snapshot).
func TestTotalLimitRoundRobin(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	l.define(domain.Policy{Ref: "act", Runner: "r", MaxConcurrent: 5, MaxConcurrentTotal: 2, ConcurrencyKey: "tenant"})
	// a has 3 waiters requested first, then b and c.
	for _, r := range [][2]string{{"a1", "a"}, {"a2", "a"}, {"a3", "a"}, {"b1", "b"}, {"c1", "c"}, {"c2", "c"}} {
		l.request(r[0], "act", r[1])
	}
	q := l.qs.Get("act")
	if got := ids(q.Grantable(10, t0)); !slices.Equal(got, []string{"a1", "b1"}) {
		t.Fatalf("Grantable = %v, want [a1 b1] (one per key in turn, 2 total)", got)
	}
	l.mustGrant("a1", "act", "a")
	for _, id := range []string{"a2", "c1"} { // passing b (and c) once is allowed: a decision on a stale fold
		if err := q.CheckGrant(id, id[:1], l.at); err != nil {
			t.Fatalf("CheckGrant %s: %v", id, err)
		}
	}
	l.mustGrant("b1", "act", "b")
	if got := ids(q.Grantable(10, t0)); len(got) != 0 {
		t.Fatalf("Grantable with the total full = %v", got)
	}
	wantErr(t, "over the total", q.CheckGrant("c1", "c", l.at), "max_concurrent_total")
	l.end("a1", domain.ExecutionCompleted{})
	// The round resumes after b: c, then a.
	if got := ids(q.Grantable(10, t0)); !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("Grantable after a1 ended = %v, want [c1]", got)
	}
	if k, ok := q.LastKey(); !ok || k != "b" {
		t.Fatalf("LastKey = %q %v", k, ok)
	}
	// The round robin's state survives a snapshot.
	r := domain.RestoreQueues(l.qs.Snapshot()).Get("act")
	if got := ids(r.Grantable(10, t0)); !slices.Equal(got, []string{"c1"}) || r.ActiveTotal() != 1 {
		t.Fatalf("restored: Grantable = %v, active total %d", got, r.ActiveTotal())
	}
	l.mustGrant("c1", "act", "c")
	l.end("b1", domain.ExecutionCompleted{})
	l.end("c1", domain.ExecutionCompleted{})
	if got := ids(q.Grantable(10, t0)); !slices.Equal(got, []string{"a2", "c2"}) {
		t.Fatalf("Grantable = %v, want [a2 c2]", got)
	}
	l.mustGrant("a2", "act", "a")
	// Passing c once (granting a3 while c is next) is allowed; a second
	// pass is not.
	l.mustGrant("a3", "act", "a")
	l.request("a4", "act", "a")
	l.end("a2", domain.ExecutionCompleted{})
	wantErr(t, "c skipped twice", q.CheckGrant("a4", "a", l.at), `skips key "c"`)
	l.mustGrant("c2", "act", "c")
}

// TestTotalLimitPerKeyLimitStillHolds: a key value at its own
// max_concurrent is not eligible: the round passes it without a skip.
func TestTotalLimitPerKeyLimitStillHolds(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	l.define(domain.Policy{Ref: "act", Runner: "r", MaxConcurrent: 1, MaxConcurrentTotal: 3, ConcurrencyKey: "tenant"})
	for _, r := range [][2]string{{"a1", "a"}, {"a2", "a"}, {"b1", "b"}, {"b2", "b"}} {
		l.request(r[0], "act", r[1])
	}
	q := l.qs.Get("act")
	l.mustGrant("a1", "act", "a")
	l.mustGrant("b1", "act", "b")
	if got := ids(q.Grantable(10, t0)); len(got) != 0 {
		t.Fatalf("Grantable = %v, want none (each key at max_concurrent 1)", got)
	}
	wantErr(t, "per-key limit", q.CheckGrant("a2", "a", l.at), "max_concurrent 1")
	l.end("b1", domain.ExecutionCompleted{})
	l.mustGrant("b2", "act", "b") // passes a (not eligible): no skip
	l.end("a1", domain.ExecutionCompleted{})
	l.mustGrant("a2", "act", "a")
}

// TestTotalLimitValidation: max_concurrent_total needs a concurrency_key
// and is 1..MaxConcurrentLimit.
func TestTotalLimitValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    domain.Policy
		want string
	}{
		{domain.Policy{Ref: "a", Runner: "r", MaxConcurrentTotal: 2}, "needs a concurrency_key"},
		{domain.Policy{Ref: "a", Runner: "r", MaxConcurrentTotal: -1, ConcurrencyKey: "k"}, "max_concurrent_total -1"},
		{domain.Policy{Ref: "a", Runner: "r", MaxConcurrentTotal: domain.MaxConcurrentLimit + 1, ConcurrencyKey: "k"}, "max_concurrent_total"},
	} {
		err := tc.p.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.p, err, tc.want)
		}
	}
	if err := (domain.Policy{Ref: "a", Runner: "r", MaxConcurrentTotal: 3, ConcurrencyKey: "k"}).WithDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestTotalLimitPriorityTies: under a total limit the round robin grants
// each key value's next waiter in that value's grant order: priority 1
// first, then 2, 3, 4, and within one priority the oldest request first.
// Catches: a tie within one priority broken for the newest (the key
// value's next waiter, fifo.first, keeping the last of the best priority
// it meets), which the round robin, Next and CheckGrant would all share.
func TestTotalLimitPriorityTies(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	l.define(domain.Policy{Ref: "act", Runner: "r", MaxConcurrent: 5, MaxConcurrentTotal: 2, ConcurrencyKey: "tenant"})
	for _, r := range []struct {
		id   string
		prio int
	}{{"a1", 3}, {"b1", 4}, {"a2", 2}, {"a3", 3}, {"b2", 4}, {"a4", 2}, {"a5", 1}, {"b3", 2}, {"a6", 4}, {"a7", 1}, {"b4", 2}} {
		l.apply(domain.ExecutionStream(r.id), domain.ExecutionRequested{Action: "act", Input: tenantInput(r.id[:1]), Priority: r.prio})
	}
	q := l.qs.Get("act")
	// a: a5 a7 (1), a2 a4 (2), a1 a3 (3), a6 (4); b: b3 b4 (2), b1 b2 (4);
	// one of each value per round while both wait, a first (the smallest).
	for i, want := range [][]string{{"a5", "b3"}, {"a7", "b4"}, {"a2", "b1"}, {"a4", "b2"}, {"a1"}, {"a3"}, {"a6"}} {
		if next, ok := q.Key("a").Next(); ok && next.Execution != want[0] {
			t.Fatalf("round %d: Next of key a = %s, want %s", i, next.Execution, want[0])
		}
		got := ids(q.Grantable(10, t0))
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: Grantable = %v, want %v", i, got, want)
		}
		for _, id := range got {
			l.mustGrant(id, "act", id[:1])
		}
		for _, id := range got {
			l.end(id, domain.ExecutionCompleted{})
		}
	}
}

// TestTotalLimitWaiterEndHoldsNoSlot: a waiter that ends before its grant
// (cancelled, or timed out in the queue) frees no total slot: it held
// none. Catches: a waiter's end counted off the action's running total
// (Queue.ActiveTotal), which lets the next grants exceed
// max_concurrent_total.
func TestTotalLimitWaiterEndHoldsNoSlot(t *testing.T) {
	t.Parallel()
	l := newQLog(t)
	l.define(domain.Policy{Ref: "act", Runner: "r", MaxConcurrent: 2, MaxConcurrentTotal: 2, ConcurrencyKey: "tenant"})
	for _, r := range [][2]string{{"a1", "a"}, {"b1", "b"}, {"a2", "a"}, {"a3", "a"}, {"b2", "b"}} {
		l.request(r[0], "act", r[1])
	}
	q := l.qs.Get("act")
	l.mustGrant("a1", "act", "a")
	l.mustGrant("b1", "act", "b")
	l.end("a2", domain.ExecutionCancelled{Reason: "cancelled by its client"})
	l.end("a3", domain.ExecutionCancelled{Code: domain.CancelQueueTimeout, Reason: "it waited longer than the queue timeout"})
	for _, r := range []*domain.Queue{q, domain.RestoreQueues(l.qs.Snapshot()).Get("act")} {
		if r.ActiveTotal() != 2 || r.TotalFree() != 0 {
			t.Fatalf("after two waiters ended: active total %d, free %d; want 2 and 0 (a1 and b1 run)", r.ActiveTotal(), r.TotalFree())
		}
		if got := ids(r.Grantable(10, t0)); len(got) != 0 {
			t.Fatalf("Grantable with the total full = %v", got)
		}
	}
	wantErr(t, "over the total", q.CheckGrant("b2", "b", l.at), "max_concurrent_total")
	l.end("a1", domain.ExecutionCompleted{})
	if got := ids(q.Grantable(10, t0)); !slices.Equal(got, []string{"b2"}) || q.ActiveTotal() != 1 {
		t.Fatalf("after a1 ended: Grantable = %v, active total %d; want [b2] and 1", got, q.ActiveTotal())
	}
	l.mustGrant("b2", "act", "b")
}
