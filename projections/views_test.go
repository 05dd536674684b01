package projections_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/internal/waitfor"
	"github.com/turnstile/turnstile/projections"
)

// viewsLog writes a small, legal history: actions a (limit 2) and b (limit
// 1), six requests on a, three on b, one for an undefined action, grants,
// a completion, a failure and a cancellation.
func viewsLog(t *testing.T) eventstore.Store {
	t.Helper()
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { _ = store.Close() })
	w := logWriter{t: t, store: store}
	w.action("a", 2)
	w.action("b", 1)
	for i := 1; i <= 6; i++ {
		w.request(fmt.Sprintf("a%d", i), "a")
	}
	for i := 1; i <= 3; i++ {
		w.request(fmt.Sprintf("b%d", i), "b")
	}
	w.request("x1", "nope")
	w.put(domain.ExecutionStream("x1"), domain.OwnerExecutor, "x", domain.ExecutionRejected{Code: domain.RejectUnknownAction, Reason: "no such action"})
	w.grant("a1", "a", "w1")
	w.grant("a2", "a", "w1")
	w.run("a1", "w1") // completes
	w.grant("a3", "a", "w1")
	w.put(domain.ExecutionStream("a2"), domain.OwnerWorker, "w1", domain.ExecutionRunning{Worker: "w1", Attempt: 1})
	w.put(domain.ExecutionStream("a2"), domain.OwnerWorker, "w1", domain.ExecutionFailed{Error: "boom"})
	w.put(domain.ExecutionStream("a6"), domain.OwnerExecutor, "x", domain.ExecutionCancelled{Reason: "client asked"})
	w.grant("b1", "b", "w2")
	return store
}

func readAll(t testing.TB, store eventstore.Store) []domain.Envelope {
	t.Helper()
	evs, err := store.ReadAll(context.Background(), 0, 100_000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestViewsSameWhateverTheBatching(t *testing.T) {
	t.Parallel()
	store := viewsLog(t)
	evs := readAll(t, store)

	whole := projections.NewViews()
	if err := whole.Apply(evs); err != nil {
		t.Fatal(err)
	}
	one := projections.NewViews()
	for i := range evs {
		if err := one.Apply(evs[i : i+1]); err != nil {
			t.Fatal(err)
		}
		if err := one.Apply(evs[:i+1]); err != nil { // a redelivery changes nothing
			t.Fatal(err)
		}
	}
	followed := projections.NewViews()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- followed.Run(ctx, store) }()
	waitfor.That(t, "the subscription to fold every event", func() bool { return followed.Next() >= uint64(len(evs)) })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	caught := projections.NewViews()
	if err := caught.CatchUp(context.Background(), store); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]*projections.Views{"one by one": one, "subscription": followed, "catch-up": caught} {
		if d := projections.Compare(whole, v, 10); len(d) != 0 {
			t.Errorf("%s differs from one batch: %v", name, d)
		}
	}

	// Compare notices a difference.
	short := projections.NewViews()
	if err := short.Apply(evs[:len(evs)-1]); err != nil {
		t.Fatal(err)
	}
	if d := projections.Compare(whole, short, 10); len(d) == 0 {
		t.Error("Compare found no difference between views one event apart")
	}
}

func TestViewsQueries(t *testing.T) {
	t.Parallel()
	store := viewsLog(t)
	evs := readAll(t, store)
	v := projections.NewViews()
	if err := v.Apply(evs); err != nil {
		t.Fatal(err)
	}

	st, ok := v.Stats("a")
	if !ok {
		t.Fatal("no stats for a")
	}
	want := projections.QueueStats{Action: "a", QueueLength: 2, ActiveCount: 1, MaxConcurrent: 2, TotalEnqueued: 6, TotalGranted: 3,
		TotalCompleted: 1, TotalFailed: 1, TotalCancelled: 1}
	got := st
	got.OldestEnqueuedAt, got.WaitP50Ms, got.WaitP95Ms, got.Position = nil, 0, 0, 0
	if got != want {
		t.Errorf("stats of a:\n got %+v\nwant %+v", got, want)
	}
	a4, _ := v.View("a4")
	if st.OldestEnqueuedAt == nil || !st.OldestEnqueuedAt.Equal(*a4.RequestedAt) {
		t.Errorf("oldest_enqueued_at = %v, want a4's request time %v", st.OldestEnqueuedAt, a4.RequestedAt)
	}
	if st.WaitP95Ms < st.WaitP50Ms || st.WaitP50Ms < 0 {
		t.Errorf("wait percentiles p50 %v p95 %v", st.WaitP50Ms, st.WaitP95Ms)
	}
	if _, ok := v.Stats("nope"); ok {
		t.Error("stats for an undefined action")
	}
	if all := v.AllStats(); len(all) != 2 || all[0].Action != "a" || all[1].Action != "b" {
		t.Errorf("AllStats = %+v", all)
	}

	q, _ := v.Queue("a")
	if len(q.Waiting) != 2 || q.Waiting[0].ID != "a4" || q.Waiting[1].ID != "a5" {
		t.Errorf("queue a waiting = %+v, want a4, a5", q.Waiting)
	}
	if len(q.Active) != 1 || q.Active[0] != "a3" {
		t.Errorf("queue a active = %v, want [a3]", q.Active)
	}

	x1, _ := v.View("x1")
	if x1.Status != domain.StatusRejected || x1.Error == "" {
		t.Errorf("x1 = %+v, want rejected with a reason", x1)
	}
	a2, _ := v.View("a2")
	if a2.Status != domain.StatusFailed || a2.Error != "boom" || a2.Worker != "w1" || a2.RunningAt == nil || a2.EndedAt == nil {
		t.Errorf("a2 = %+v", a2)
	}

	// Newest first, paged.
	var ids []string
	after := ""
	for {
		page, next, err := v.List(projections.ListFilter{Limit: 4, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range page {
			ids = append(ids, x.ID)
		}
		if next == "" {
			break
		}
		after = next
	}
	wantIDs := []string{"x1", "b3", "b2", "b1", "a6", "a5", "a4", "a3", "a2", "a1"}
	if fmt.Sprint(ids) != fmt.Sprint(wantIDs) {
		t.Errorf("paged list = %v, want %v", ids, wantIDs)
	}
	page, _, _ := v.List(projections.ListFilter{Action: "a", Status: domain.StatusRequested})
	if len(page) != 2 || page[0].ID != "a5" || page[1].ID != "a4" {
		t.Errorf("waiting executions of a = %v", page)
	}
	if _, _, err := v.List(projections.ListFilter{After: "zzz"}); err == nil {
		t.Error("an unknown cursor was accepted")
	}

	ws := v.Workers()
	if len(ws) != 2 || ws[0].ID != "w1" || ws[0].InFlight != 1 || ws[0].Executions[0] != "a3" {
		t.Errorf("workers = %+v", ws)
	}
}

func TestExecutionFeedResumesWithoutGaps(t *testing.T) {
	t.Parallel()
	store := viewsLog(t)
	evs := readAll(t, store)
	v := projections.NewViews()
	if err := v.Apply(evs[:20]); err != nil {
		t.Fatal(err)
	}
	// Read the feed in small pages while the rest of the log arrives; the
	// union of what was read must end with every execution's final state.
	last := map[string]projections.ExecutionView{}
	from, prev := uint64(0), uint64(0)
	applied := 20
	for {
		page, next := v.ExecutionsSince(from, "", 2)
		for _, x := range page {
			if x.Position < prev {
				t.Fatalf("feed went back: %d after %d", x.Position, prev)
			}
			prev = x.Position
			last[x.ID] = x
		}
		from = next
		if len(page) == 0 {
			if applied == len(evs) {
				break
			}
			end := min(applied+3, len(evs))
			if err := v.Apply(evs[applied:end]); err != nil {
				t.Fatal(err)
			}
			applied = end
		}
	}
	full := projections.NewViews()
	if err := full.Apply(evs); err != nil {
		t.Fatal(err)
	}
	all, _, _ := full.List(projections.ListFilter{Limit: 100})
	if len(last) != len(all) {
		t.Errorf("feed saw %d executions, the log has %d", len(last), len(all))
	}
	for _, x := range all {
		if got := last[x.ID]; got.Status != x.Status || got.Position != x.Position {
			t.Errorf("feed's last state of %s = %s@%d, want %s@%d", x.ID, got.Status, got.Position, x.Status, x.Position)
		}
	}
	stats, next := v.StatsSince(0, "b", 100)
	if len(stats) != 1 || stats[0].Action != "b" || next != v.Next() {
		t.Errorf("StatsSince(0, b) = %+v, next %d (head %d)", stats, next, v.Next())
	}
}

// TestEndedExecutionsKeepTheirFinalState: an ended execution is kept as its
// final state only; what the read model serves for it (View, List) must be
// exactly the state a fold of its own stream gives.
func TestEndedExecutionsKeepTheirFinalState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := viewsLog(t)
	v := projections.NewViews()
	if err := v.Apply(readAll(t, store)); err != nil {
		t.Fatal(err)
	}
	listed := map[string]projections.ExecutionView{}
	page, _, err := v.List(projections.ListFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range page {
		listed[x.ID] = x
	}
	ended := 0
	for _, id := range []string{"a1", "a2", "a6", "x1", "a3", "b1", "b2"} {
		want, found, err := projections.ExecutionAsOf(ctx, store, id, projections.Cut{Position: math.MaxUint64})
		if err != nil || !found {
			t.Fatalf("%s: %v %v", id, found, err)
		}
		got, ok := v.View(id)
		if !ok {
			t.Fatalf("%s is not in the read model", id)
		}
		wj, _ := json.Marshal(want)
		gj, _ := json.Marshal(got)
		lj, _ := json.Marshal(listed[id])
		if string(gj) != string(wj) || string(lj) != string(wj) {
			t.Errorf("%s:\n view %s\n list %s\n want %s", id, gj, lj, wj)
		}
		if want.Status.Terminal() {
			ended++
		}
	}
	if ended != 4 {
		t.Fatalf("the log has %d ended executions among those checked, want 4", ended)
	}
	// Filters still see an ended execution's action and status.
	failed, _, err := v.List(projections.ListFilter{Action: "a", Status: domain.StatusFailed})
	if err != nil || len(failed) != 1 || failed[0].ID != "a2" {
		t.Errorf("failed executions of a: %+v %v", failed, err)
	}
}
