package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/internal/waitfor"
	"github.com/turnstile/turnstile/projections"
)

// TestStateFeedsStartWithTheState: a state feed opened with no start sends
// the current state at once (every action's statistics; every execution
// that has not ended, none that has), in position order, then the changes.
func TestStateFeedsStartWithTheState(t *testing.T) {
	e := newE2E(t)
	e.define("feed.done", "core.echo", 2)
	e.define("feed.idle", "nobody.serves", 1) // no worker: its executions wait
	done := e.request("feed.done", map[string]any{"i": 0})
	e.waitStatus(done, domain.StatusCompleted)
	waiting := map[string]bool{}
	for i := range 3 {
		waiting[e.request("feed.idle", map[string]any{"i": i})] = true
	}
	// The read model folds the requests after they are accepted: wait until
	// it shows the three waiters, so the feed's first state is known.
	var st projections.QueueStats
	waitfor.That(t, "feed.idle's queue length to be 3", func() bool {
		e.mustJSON("GET", "/api/v1/actions/feed.idle/queue-stats", nil, http.StatusOK, &st)
		return st.QueueLength == 3
	}, waitfor.Note(func() string { return fmt.Sprintf("it is %d", st.QueueLength) }))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	next := func(feed <-chan sseMessage) sseMessage {
		t.Helper()
		select {
		case m, ok := <-feed:
			if !ok {
				t.Fatal("the feed ended")
			}
			return m
		case <-time.After(5 * time.Second):
			t.Fatal("the feed sent nothing for 5 s")
		}
		return sseMessage{}
	}

	stats := e.openFeed(ctx, "/api/v1/feeds/queue-stats", "")
	seen := map[string]projections.QueueStats{}
	var lastID uint64
	for len(seen) < 2 {
		m := next(stats)
		var st projections.QueueStats
		if err := json.Unmarshal([]byte(m.Data), &st); err != nil {
			t.Fatal(err)
		}
		if m.ID < lastID {
			t.Fatalf("id %d after %d", m.ID, lastID)
		}
		lastID, seen[st.Action] = m.ID, st
	}
	if seen["feed.idle"].QueueLength != 3 || seen["feed.done"].TotalCompleted != 1 {
		t.Fatalf("first states: %+v", seen)
	}

	execs := e.openFeed(ctx, "/api/v1/feeds/executions", "")
	got := map[string]bool{}
	for len(got) < 3 {
		m := next(execs)
		var v projections.ExecutionView
		if err := json.Unmarshal([]byte(m.Data), &v); err != nil {
			t.Fatal(err)
		}
		if !waiting[v.ID] {
			t.Fatalf("the feed started with %s (%s), not one of the waiting executions", v.ID, v.Status)
		}
		got[v.ID] = true
	}
	// then the changes
	id := e.request("feed.idle", map[string]any{"i": 3})
	for {
		m := next(execs)
		var v projections.ExecutionView
		if err := json.Unmarshal([]byte(m.Data), &v); err != nil {
			t.Fatal(err)
		}
		if v.ID == id {
			break
		}
		if v.ID == done {
			t.Fatalf("an ended execution was sent: %s", m.Data)
		}
	}
}
