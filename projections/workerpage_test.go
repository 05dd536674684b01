package projections_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
)

// TestWorkerPage: workers come by id, a page at a time, each page after
// the last id of the one before; lost and stopped workers last seen before
// EndedBefore are left out, live ones never, however old.
func TestWorkerPage(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.Options{Clock: func() time.Time { return now }})
	t.Cleanup(func() { _ = store.Close() })
	w := logWriter{t, store}
	reg := func(id string) {
		w.put(domain.WorkerStream(id), domain.OwnerWorker, id, domain.WorkerRegistered{Incarnation: id + "-i1", Slots: 1})
	}
	// Two hours ago: w0 lost, w1 stopped, w2 registered (idle since, still active).
	for i := range 3 {
		reg(fmt.Sprintf("w%d", i))
	}
	w.put(domain.WorkerStream("w0"), domain.OwnerExecutor, "x", domain.WorkerLost{Incarnation: "w0-i1"})
	w.put(domain.WorkerStream("w1"), domain.OwnerWorker, "w1", domain.WorkerStopped{Incarnation: "w1-i1"})
	// Now: w3..w6 registered, w6 stopped at once.
	now = now.Add(2 * time.Hour)
	for i := 3; i < 7; i++ {
		reg(fmt.Sprintf("w%d", i))
	}
	w.put(domain.WorkerStream("w6"), domain.OwnerWorker, "w6", domain.WorkerStopped{Incarnation: "w6-i1"})
	v := projections.NewViews()
	if err := v.CatchUp(context.Background(), store); err != nil {
		t.Fatal(err)
	}

	pages := func(f projections.WorkerFilter) (out [][]string) {
		for {
			page, next := v.WorkerPage(f)
			var ids []string
			for _, wv := range page {
				ids = append(ids, wv.ID)
			}
			out = append(out, ids)
			if next == "" {
				return out
			}
			if next != ids[len(ids)-1] {
				t.Fatalf("next %q, want the page's last id %q", next, ids[len(ids)-1])
			}
			f.After = next
		}
	}
	for _, tt := range []struct {
		f    projections.WorkerFilter
		want [][]string
	}{
		{projections.WorkerFilter{}, [][]string{{"w0", "w1", "w2", "w3", "w4", "w5", "w6"}}},
		{projections.WorkerFilter{Limit: 3}, [][]string{{"w0", "w1", "w2"}, {"w3", "w4", "w5"}, {"w6"}}},
		{projections.WorkerFilter{Limit: 7}, [][]string{{"w0", "w1", "w2", "w3", "w4", "w5", "w6"}}},
		{projections.WorkerFilter{Limit: 2, After: "w4"}, [][]string{{"w5", "w6"}}},
		{projections.WorkerFilter{Limit: 2, After: "w6"}, [][]string{nil}},
		{projections.WorkerFilter{Limit: 2, EndedBefore: now.Add(-time.Hour)}, [][]string{{"w2", "w3"}, {"w4", "w5"}, {"w6"}}},
	} {
		if got := pages(tt.f); !slices.EqualFunc(got, tt.want, slices.Equal[[]string]) {
			t.Errorf("%+v: pages %v, want %v", tt.f, got, tt.want)
		}
	}
}
