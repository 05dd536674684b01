package projections_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
)

// TestRetainForgetsTheOldestEnded: with Retain(n) the read model keeps every
// live execution and the n most recently ended ones, whatever the batching,
// whether n is set before or after the fold, and across a snapshot.
func TestRetainForgetsTheOldestEnded(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.Options{})
	defer store.Close()
	w := logWriter{t: t, store: store}
	w.action("a", 1)
	const n = 3000
	for i := range n {
		id := fmt.Sprintf("x%04d", i)
		w.request(id, "a")
		w.grant(id, "a", "w1")
		w.run(id, "w1") // ends
	}
	w.request("live", "a")
	evs := readAll(t, store)

	const keep = 100
	folded := func(batch int, retainFirst bool) *projections.Views {
		v := projections.NewViews()
		if retainFirst {
			v.Retain(keep)
		}
		for i := 0; i < len(evs); i += batch {
			if err := v.Apply(evs[i:min(i+batch, len(evs))]); err != nil {
				t.Fatal(err)
			}
		}
		if !retainFirst {
			v.Retain(keep)
		}
		return v
	}
	v := folded(len(evs), true)
	if got := v.Evicted(); got != n-keep {
		t.Errorf("evicted %d, want %d", got, n-keep)
	}
	if _, ok := v.View("x0000"); ok {
		t.Error("the oldest ended execution is still held")
	}
	if x, ok := v.View(fmt.Sprintf("x%04d", n-1)); !ok || x.Status != domain.StatusCompleted {
		t.Errorf("the newest ended execution: %+v %v", x, ok)
	}
	if x, ok := v.View("live"); !ok || x.Status != domain.StatusRequested {
		t.Errorf("the live execution: %+v %v", x, ok)
	}
	page, _, err := v.List(projections.ListFilter{Action: "a", Limit: 1000})
	if err != nil || len(page) != keep+1 || page[0].ID != "live" || page[keep].ID != fmt.Sprintf("x%04d", n-keep) {
		t.Errorf("list: %d executions (%v), want %d from live down to x%04d", len(page), err, keep+1, n-keep)
	}
	if st, _ := v.Stats("a"); st.TotalCompleted != n || st.TotalEnqueued != n+1 {
		t.Errorf("queue_stats forget nothing: %+v", st)
	}
	for name, other := range map[string]*projections.Views{
		"one event at a time": folded(1, true),
		"batches of 7":        folded(7, true),
		"retain set after":    folded(len(evs), false),
	} {
		if d := projections.Compare(v, other, 5); len(d) != 0 {
			t.Errorf("%s differs: %v", name, d)
		}
	}

	// Across a snapshot taken halfway, with the retention set again.
	half := projections.NewViews()
	half.Retain(keep)
	if err := half.Apply(evs[:len(evs)/2]); err != nil {
		t.Fatal(err)
	}
	files := projections.SnapshotFiles{Dir: t.TempDir()}
	if err := half.SaveSnapshot(files); err != nil {
		t.Fatal(err)
	}
	restored := projections.LoadViews(context.Background(), files, store, slog.New(slog.DiscardHandler))
	restored.Retain(keep)
	if err := restored.Apply(evs); err != nil {
		t.Fatal(err)
	}
	if d := projections.Compare(v, restored, 5); len(d) != 0 {
		t.Errorf("restored from a snapshot: %v", d)
	}
}

// TestHoldFromKeepsWhatEndedSince: HoldFrom(pos) keeps every execution that
// ended at pos or later whatever the retention, and moving pos on lets the
// retention forget them.
func TestHoldFromKeepsWhatEndedSince(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.Options{})
	defer store.Close()
	w := logWriter{t: t, store: store}
	w.action("a", 1)
	for i := range 50 {
		id := fmt.Sprintf("x%02d", i)
		w.request(id, "a")
		w.grant(id, "a", "w1")
		w.run(id, "w1")
	}
	evs := readAll(t, store)
	half := evs[len(evs)/2].Position

	v := projections.NewViews()
	v.Retain(1)
	v.HoldFrom(half)
	if err := v.Apply(evs); err != nil {
		t.Fatal(err)
	}
	held, _ := v.ExecutionsSince(half, "", 1<<20)
	if len(held) < 20 {
		t.Fatalf("%d executions changed since position %d are held, want the second half (about 25)", len(held), half)
	}
	for _, x := range held {
		if x.Status != domain.StatusCompleted {
			t.Fatalf("held %s is %s", x.ID, x.Status)
		}
	}
	before := v.Evicted()
	if before == 0 {
		t.Fatal("nothing that ended before the hold was forgotten")
	}
	v.HoldFrom(v.Next())
	if got := v.Evicted(); got != 49 {
		t.Fatalf("after the hold moved to the end: %d forgotten, want 49 (the retention keeps 1)", got)
	}
}
