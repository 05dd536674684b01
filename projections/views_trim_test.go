package projections_test

import (
	"reflect"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
)

// TestViewsFromCheckpoint: a read model started from the state at any
// position and fed the rest of the log shows every execution it knows as
// the whole log's read model does, and knows every execution that was live
// at that position or requested after it; ForgetBefore the end leaves only
// the live ones.
func TestViewsFromCheckpoint(t *testing.T) {
	t.Parallel()
	evs := readAll(t, viewsLog(t))
	whole := projections.NewViews()
	if err := whole.Apply(evs); err != nil {
		t.Fatal(err)
	}
	all, _, err := whole.List(projections.ListFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for cut := 0; cut <= len(evs); cut++ {
		st := projections.NewState()
		for i := range evs[:cut] {
			_ = st.Apply(&evs[i])
		}
		live := map[string]bool{}
		for _, id := range st.LiveIDs() {
			live[id] = true
		}
		v := projections.ViewsFromCheckpoint(st.Snapshot())
		if err := v.Apply(evs[cut:]); err != nil {
			t.Fatal(err)
		}
		for _, w := range all {
			got, ok := v.View(w.ID)
			if !ok {
				if live[w.ID] || w.Position >= uint64(cut) && w.RequestedAt != nil && firstPos(evs, w.ID) >= uint64(cut) {
					t.Fatalf("cut %d: execution %s (live then, or requested after) is unknown", cut, w.ID)
				}
				continue
			}
			if !reflect.DeepEqual(got.ExecutionState, w.ExecutionState) {
				t.Fatalf("cut %d: execution %s: %+v, the whole read model says %+v", cut, w.ID, got.ExecutionState, w.ExecutionState)
			}
		}
		mid := uint64(len(evs) * 2 / 3)
		v.ForgetBefore(mid)
		for _, w := range all {
			if _, known := whole.View(w.ID); known && w.Position >= mid {
				if _, ok := v.View(w.ID); !ok && (live[w.ID] || firstPos(evs, w.ID) >= uint64(cut)) {
					t.Fatalf("cut %d: execution %s (last event at %d) forgotten before %d", cut, w.ID, w.Position, mid)
				}
			}
		}
		v.ForgetBefore(uint64(len(evs)))
		left, _, _ := v.List(projections.ListFilter{Limit: 1000})
		for _, x := range left {
			if x.Status.Terminal() {
				t.Fatalf("cut %d: ended execution %s kept after ForgetBefore the end", cut, x.ID)
			}
		}
	}
}

// firstPos is the position of execution id's first event.
func firstPos(evs []domain.Envelope, id string) uint64 {
	for _, e := range evs {
		if e.Stream == "execution-"+id {
			return e.Position
		}
	}
	return ^uint64(0)
}
