package projections_test

import (
	"slices"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
)

// TestCurrentState: where a state feed starts. CurrentExecutions pages
// through the executions that have not ended, in position order, and
// leaves out one that changed after its next position (the changes carry
// it); CurrentStats gives every defined action's statistics.
func TestCurrentState(t *testing.T) {
	t.Parallel()
	store := viewsLog(t)
	views := projections.NewViews()
	if err := views.Apply(readAll(t, store)); err != nil {
		t.Fatal(err)
	}
	pages, next := views.CurrentExecutions("")
	if next != views.Next() {
		t.Fatalf("next %d, the views are at %d", next, views.Next())
	}
	// a4 is cancelled after the start: the changes from next carry it.
	w := logWriter{t: t, store: store}
	w.put(domain.ExecutionStream("a4"), domain.OwnerExecutor, "x", domain.ExecutionCancelled{Reason: "later"})
	evs := readAll(t, store)
	if err := views.Apply(evs[next:]); err != nil {
		t.Fatal(err)
	}
	var ids []string
	var last uint64
	sizes := []int{}
	for page := pages(2); len(page) > 0; page = pages(2) {
		sizes = append(sizes, len(page))
		for _, x := range page {
			if x.Position < last || x.Position >= next || x.Status.Terminal() {
				t.Fatalf("%s at %d (%s) after position %d, next %d", x.ID, x.Position, x.Status, last, next)
			}
			last = x.Position
			ids = append(ids, x.ID)
		}
	}
	slices.Sort(ids)
	if want := []string{"a3", "a5", "b1", "b2", "b3"}; !slices.Equal(ids, want) || slices.Max(sizes) > 2 {
		t.Fatalf("current executions %v in pages of %v, want %v in pages of at most 2", ids, sizes, want)
	}
	changed, _ := views.ExecutionsSince(next, "", 100)
	if len(changed) != 1 || changed[0].ID != "a4" || changed[0].Status != domain.StatusCancelled {
		t.Fatalf("changes from next: %+v, want a4 cancelled", changed)
	}

	statPages, _ := views.CurrentStats("b")
	st := statPages(10)
	if len(st) != 1 || st[0].Action != "b" || st[0].QueueLength != 2 || len(statPages(10)) != 0 {
		t.Fatalf("current stats of b: %+v", st)
	}
	all, _ := views.CurrentStats("")
	if got := all(10); len(got) != 2 {
		t.Fatalf("current stats: %+v, want a and b", got)
	}
}
