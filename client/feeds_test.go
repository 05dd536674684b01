package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnstile/turnstile/client"
	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/internal/feedproxy"
)

// TestFollowResumes drops a feed's connection: the feed resumes after the
// last id it received, without a gap or a duplicate.
func TestFollowResumes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	srv := newServer(t)
	drop := feedproxy.Start(t, srv, "/api/v1/feeds/events", 2)
	proxied := drop.URL
	c := newClient(t, proxied, readerToken)
	admin := newClient(t, srv, adminToken)
	if _, _, err := admin.DefineAction(ctx, wire.Policy{Ref: "demo.noop", Runner: "core.noop"}); err != nil {
		t.Fatal(err)
	}
	r, err := admin.RequestExecution(ctx, wire.ExecutionRequest{Action: "demo.noop"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Wait(ctx, r.ID); err != nil {
		t.Fatal(err)
	}

	var positions []string
	var reconnects []string
	err = c.FollowEvents(ctx, client.FeedOptions{Start: client.FromPosition(0), OnReconnect: func(err error, lastID string) {
		reconnects = append(reconnects, lastID)
	}}, func(e wire.Event) error {
		positions = append(positions, strconv.FormatUint(e.Position, 10))
		if len(positions) == 6 {
			return client.ErrStop
		}
		return nil
	})
	if err != nil {
		t.Fatalf("FollowEvents: %v", err)
	}
	if got := strings.Join(positions, " "); got != "0 1 2 3 4 5" {
		t.Errorf("events across a dropped connection: positions %s, want 0 1 2 3 4 5", got)
	}
	if ids := drop.LastIDs(); len(ids) != 2 || ids[0] != "" || ids[1] != "1" {
		t.Errorf("feed requests' Last-Event-ID: %q, want the first without and the second after id 1", ids)
	}
	if strings.Join(reconnects, " ") != "1" {
		t.Errorf("OnReconnect: %q, want once after id 1", reconnects)
	}
}

// TestWaitResumes drops the executions feed under Wait.
func TestWaitResumes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	srv := newServer(t)
	admin := newClient(t, srv, adminToken)
	if _, _, err := admin.DefineAction(ctx, wire.Policy{Ref: "demo.sleep", Runner: "core.sleep", MaxConcurrent: 8}); err != nil {
		t.Fatal(err)
	}
	// Other executions of the action change state while Wait follows the
	// feed; the proxy drops it after the first message.
	var others []string
	for range 3 {
		r, err := admin.RequestExecution(ctx, wire.ExecutionRequest{Action: "demo.sleep", Input: json.RawMessage(`{"seconds":0.05}`)})
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, r.ID)
	}
	r, err := admin.RequestExecution(ctx, wire.ExecutionRequest{Action: "demo.sleep", Input: json.RawMessage(`{"seconds":0.3}`)})
	if err != nil {
		t.Fatal(err)
	}
	drop := feedproxy.Start(t, srv, "/api/v1/feeds/executions", 1)
	proxied := drop.URL
	x, err := newClient(t, proxied, readerToken).Wait(ctx, r.ID)
	if err != nil || x.Status != "completed" || x.ID != r.ID {
		t.Fatalf("Wait through a dropping proxy: %+v, %v", x, err)
	}
	lastIDs := drop.LastIDs()
	if len(lastIDs) < 1 {
		t.Errorf("Wait did not follow the feed")
	}
	if len(lastIDs) == 2 && lastIDs[1] == "" {
		t.Errorf("the reconnection sent no Last-Event-ID: %q", lastIDs)
	}
}

func TestFollowRefusedAndUnreachable(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	srv := newServer(t)
	c := newClient(t, srv, readerToken)
	// A refusal ends the feed at once.
	err := c.Follow(ctx, client.FeedEvents, client.FeedOptions{Action: "bad ref"}, func(client.Message) error { return nil })
	if !client.IsInvalid(err) {
		t.Errorf("a feed with a bad action: %v", err)
	}
	err = c.Follow(ctx, "nothing", client.FeedOptions{}, func(client.Message) error { return nil })
	if !client.IsNotFound(err) {
		t.Errorf("a feed that does not exist: %v", err)
	}
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	err = newClient(t, gone.URL, "").FollowQueueStats(ctx, client.FeedOptions{}, func(wire.QueueStats) error { return nil })
	if err == nil || client.AsProblem(err) != nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("a server that is not there: %v", err)
	}
	// The function's error ends the feed and is returned.
	boom := errors.New("boom")
	admin := newClient(t, srv, adminToken)
	if _, _, err := admin.DefineAction(ctx, wire.Policy{Ref: "demo.noop", Runner: "core.noop"}); err != nil {
		t.Fatal(err)
	}
	err = c.FollowQueueStats(ctx, client.FeedOptions{Start: client.FromPosition(0)}, func(st wire.QueueStats) error {
		if st.Action != "demo.noop" {
			return errors.New("unexpected action " + st.Action)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("a function's error: %v", err)
	}
	// A context's end ends the feed.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err = c.FollowEvents(short, client.FeedOptions{}, func(wire.Event) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a feed past its context's deadline: %v", err)
	}
}

// TestFollowIdleTimeout: a connection on which nothing arrives (no message,
// no heartbeat) is dropped after IdleTimeout and the feed resumes after the
// last id; the time the function takes is not silence.
func TestFollowIdleTimeout(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var lastIDs []string
	stall := make(chan struct{})
	t.Cleanup(func() { close(stall) })
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		n := len(lastIDs)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		if n == 1 {
			_, _ = io.WriteString(w, "retry: 5\n\nid: 1\nevent: event\ndata: {\"position\":1}\n\n")
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond) // while the client's function runs
			_, _ = io.WriteString(w, "id: 2\nevent: event\ndata: {\"position\":2}\n\n")
			w.(http.Flusher).Flush()
			select { // then silence, the connection open
			case <-stall:
			case <-r.Context().Done():
			}
			return
		}
		_, _ = io.WriteString(w, "id: 3\nevent: event\ndata: {\"position\":3}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(fake.Close)
	c := newClient(t, fake.URL, "")
	var got []uint64
	var reasons []string
	err := c.FollowEvents(testCtx(t), client.FeedOptions{IdleTimeout: 300 * time.Millisecond, OnReconnect: func(err error, lastID string) {
		reasons = append(reasons, lastID+": "+err.Error())
	}}, func(e wire.Event) error {
		if e.Position == 1 {
			time.Sleep(600 * time.Millisecond) // longer than IdleTimeout: not silence
		}
		got = append(got, e.Position)
		if e.Position == 3 {
			return client.ErrStop
		}
		return nil
	})
	if err != nil || len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("FollowEvents: %v, positions %v", err, got)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(lastIDs, ",") != ",2" || len(reasons) != 1 || !strings.Contains(reasons[0], "2: ") || !strings.Contains(reasons[0], "nothing arrived for 300ms") {
		t.Errorf("requests' Last-Event-ID %q, reconnections %q; want one, after id 2, for silence", lastIDs, reasons)
	}
}
