package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/archive"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/internal/waitfor"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/node"
)

// e2e is a whole turnstile in one test: store, executor, two workers, the
// read model following the log and the API on a real HTTP listener.
type e2e struct {
	t     *testing.T
	store eventstore.Store
	url   string
}

func newE2E(t *testing.T) *e2e { return newE2ERetaining(t, 0) }

// newE2ERetaining is newE2E with a read model that keeps only the retain most
// recently ended executions (0: all).
func newE2ERetaining(t *testing.T, retain int) *e2e {
	t.Helper()
	e, _ := startE2E(t, memstore.New(memstore.Options{}), e2eSetup{retain: retain})
	return e
}

// e2eSetup is what a test changes of newE2E's turnstile.
type e2eSetup struct {
	node   node.Config // zero Workers, Slots, Logger: 2 workers of 8 slots, no log
	retain int         // the read model's retention (0: all)
	// archive, if set, is what GET reads an archived execution from, and
	// where a request's idempotency key is looked up past the live log.
	archive *archive.History
}

// startE2E starts newE2E's turnstile on store with setup, and returns it
// and its node. The test's end stops it all and closes store.
func startE2E(t *testing.T, store *memstore.Store, setup e2eSetup) (*e2e, *node.Node) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := setup.node
	if cfg.Workers == 0 && cfg.Slots == 0 {
		cfg.Workers, cfg.Slots = 2, 8
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	n, err := node.Start(ctx, store, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	views := projections.NewViews()
	views.Retain(setup.retain)
	done := make(chan error, 1)
	go func() { done <- views.Run(ctx, store) }()
	queries := projections.NewQueries(views, store)
	if setup.archive != nil {
		queries = queries.WithArchive(*setup.archive)
		n.Commands.History = *setup.archive
	}
	srv := api.New(api.Config{Commands: n.Commands, Queries: queries, Logger: cfg.Logger, FeedHeartbeat: 50 * time.Millisecond})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		cancel()
		<-done
		n.Stop()
		_ = store.Close()
	})
	return &e2e{t: t, store: store, url: hs.URL}, n
}

// do sends a request and returns the status, headers and body.
func (e *e2e) do(method, path string, body any, header ...string) (int, http.Header, []byte) {
	e.t.Helper()
	var rd io.Reader
	if s, ok := body.(string); ok {
		rd = strings.NewReader(s)
	} else if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

func (e *e2e) mustJSON(method, path string, body any, wantStatus int, out any, header ...string) {
	e.t.Helper()
	status, _, data := e.do(method, path, body, header...)
	if status != wantStatus {
		e.t.Fatalf("%s %s = %d %s, want %d", method, path, status, data, wantStatus)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			e.t.Fatalf("%s %s: %v in %s", method, path, err, data)
		}
	}
}

func (e *e2e) define(ref, runner string, limit int) {
	e.t.Helper()
	e.mustJSON("POST", "/api/v1/actions", domain.Policy{Ref: ref, Runner: runner, MaxConcurrent: limit}, http.StatusCreated, nil)
}

func (e *e2e) request(ref string, input any) string {
	e.t.Helper()
	var acc struct{ ID string }
	e.mustJSON("POST", "/api/v1/executions", map[string]any{"action": ref, "input": input}, http.StatusAccepted, &acc)
	return acc.ID
}

// waitStatus polls an execution until it has the status.
func (e *e2e) waitStatus(id string, want domain.Status) projections.ExecutionView {
	e.t.Helper()
	var v projections.ExecutionView
	waitfor.That(e.t, fmt.Sprintf("execution %s to be %s", id, want), func() bool {
		v = projections.ExecutionView{}
		e.mustJSON("GET", "/api/v1/executions/"+id, nil, http.StatusOK, &v)
		return v.Status == want
	}, waitfor.Note(func() string { return "it is " + string(v.Status) }))
	return v
}

// sseMessage is one Server-Sent Event.
type sseMessage struct {
	ID    uint64
	Event string
	Data  string
}

// openFeed connects to a feed and delivers its messages until the body ends.
func (e *e2e) openFeed(ctx context.Context, path, lastID string) <-chan sseMessage {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+path, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		e.t.Fatalf("feed %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan sseMessage)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var m sseMessage
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if m.Event != "" {
					select {
					case out <- m:
					case <-ctx.Done():
						return
					}
				}
				m = sseMessage{}
			case strings.HasPrefix(line, "id: "):
				m.ID, _ = strconv.ParseUint(strings.TrimPrefix(line, "id: "), 10, 64)
			case strings.HasPrefix(line, "event: "):
				m.Event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				m.Data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return out
}

// TestEventsFeedResumesMidBurst disconnects from /feeds/events in the middle
// of a burst of requests and reconnects with Last-Event-ID: the two parts
// together are exactly the log, with no gap and no duplicate.
func TestEventsFeedResumesMidBurst(t *testing.T) {
	e := newE2E(t)
	e.define("feed.noop", "core.noop", 4)
	const n = 200
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range n {
			e.request("feed.noop", map[string]any{})
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	var got []sseMessage
	for m := range e.openFeed(ctx, "/api/v1/feeds/events?from=0", "") {
		got = append(got, m)
		if len(got) == 150 {
			break
		}
	}
	cancel() // drop the connection in the middle of the burst
	wg.Wait()

	// Wait for the burst to settle: every execution ended.
	var st projections.QueueStats
	waitfor.That(t, fmt.Sprintf("all %d executions of feed.noop completed", n), func() bool {
		st = projections.QueueStats{}
		e.mustJSON("GET", "/api/v1/actions/feed.noop/queue-stats", nil, http.StatusOK, &st)
		return st.TotalCompleted == n
	}, waitfor.Note(func() string { return fmt.Sprintf("queue stats: %+v", st) }))
	head, err := e.store.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	for m := range e.openFeed(ctx2, "/api/v1/feeds/events?from=0", strconv.FormatUint(got[len(got)-1].ID, 10)) {
		got = append(got, m)
		if m.ID+1 >= head {
			break
		}
	}
	log, err := e.store.ReadAll(context.Background(), 0, int(head))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(log) {
		t.Fatalf("the feed delivered %d events, the log holds %d", len(got), len(log))
	}
	for i, m := range got {
		var env domain.Envelope
		if err := json.Unmarshal([]byte(m.Data), &env); err != nil {
			t.Fatal(err)
		}
		if m.ID != log[i].Position || env.Position != log[i].Position || env.ID != log[i].ID || m.Event != "event" {
			t.Fatalf("message %d: id %d event %q (position %d), the log has position %d", i, m.ID, m.Event, env.Position, log[i].Position)
		}
	}
}

// TestExecutionsFeedEndsWithEveryFinalState reads the conflated executions
// feed across a reconnect and checks that the last state seen of every
// execution is its final one.
func TestExecutionsFeedEndsWithEveryFinalState(t *testing.T) {
	e := newE2E(t)
	e.define("feed.echo", "core.echo", 2)
	ctx, cancel := context.WithCancel(context.Background())
	feed := e.openFeed(ctx, "/api/v1/feeds/executions?action=feed.echo", "")
	ids := map[string]bool{}
	for i := range 60 {
		ids[e.request("feed.echo", map[string]any{"i": i})] = true
	}
	last := map[string]projections.ExecutionView{}
	var lastID uint64
	for m := range feed {
		var v projections.ExecutionView
		if err := json.Unmarshal([]byte(m.Data), &v); err != nil {
			t.Fatal(err)
		}
		if m.ID < lastID || m.ID != v.Position {
			t.Fatalf("id %d after %d (state position %d)", m.ID, lastID, v.Position)
		}
		lastID, last[v.ID] = m.ID, v
		if len(last) >= 20 {
			break
		}
	}
	cancel()
	for id := range ids {
		e.waitStatus(id, domain.StatusCompleted)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	feed = e.openFeed(ctx2, "/api/v1/feeds/executions?action=feed.echo", strconv.FormatUint(lastID, 10))
	done := func() bool {
		for id := range ids {
			if last[id].Status != domain.StatusCompleted {
				return false
			}
		}
		return true
	}
	timeout := time.After(20 * time.Second)
	for !done() {
		select {
		case m, ok := <-feed:
			if !ok {
				t.Fatal("feed ended")
			}
			var v projections.ExecutionView
			if err := json.Unmarshal([]byte(m.Data), &v); err != nil {
				t.Fatal(err)
			}
			if v.Action != "feed.echo" {
				t.Fatalf("the action filter let through %s", v.Action)
			}
			last[v.ID] = v
		case <-timeout:
			t.Fatal("the feed did not deliver every final state")
		}
	}
}

func TestIdempotencyKey(t *testing.T) {
	e := newE2E(t)
	e.define("idem.noop", "core.noop", 1)
	body := map[string]any{"action": "idem.noop", "input": map[string]any{"a": 1}}
	st1, h1, b1 := e.do("POST", "/api/v1/executions", body, "Idempotency-Key", "k-1")
	st2, h2, b2 := e.do("POST", "/api/v1/executions", body, "Idempotency-Key", "k-1")
	if st1 != http.StatusAccepted || st2 != http.StatusAccepted {
		t.Fatalf("statuses %d %s, %d %s", st1, b1, st2, b2)
	}
	var a1, a2 struct{ ID string }
	_ = json.Unmarshal(b1, &a1)
	_ = json.Unmarshal(b2, &a2)
	if a1.ID == "" || a1.ID != a2.ID || h1.Get("Idempotent-Replayed") != "" || h2.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("ids %q %q, replayed headers %q %q", a1.ID, a2.ID, h1.Get("Idempotent-Replayed"), h2.Get("Idempotent-Replayed"))
	}
	head, _ := e.store.Head(context.Background())
	other := map[string]any{"action": "idem.noop", "input": map[string]any{"a": 2}}
	st3, h3, b3 := e.do("POST", "/api/v1/executions", other, "Idempotency-Key", "k-1")
	if st3 != http.StatusConflict || h3.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("same key, other body: %d %s", st3, b3)
	}
	if after, _ := e.store.Head(context.Background()); after > head {
		// Only the executor may have written meanwhile; nothing for the refused request.
		evs, _ := e.store.ReadAll(context.Background(), head, int(after-head))
		for _, ev := range evs {
			if ev.Type == domain.TypeExecutionRequested {
				t.Fatalf("a refused request appended %s to %s", ev.Type, ev.Stream)
			}
		}
	}
}

func TestAsOf(t *testing.T) {
	e := newE2E(t)
	e.define("asof.echo", "core.echo", 1)
	id := e.request("asof.echo", map[string]any{"x": 1})
	final := e.waitStatus(id, domain.StatusCompleted)

	var page struct{ Events []domain.Envelope }
	e.mustJSON("GET", "/api/v1/executions/"+id+"/events", nil, http.StatusOK, &page)
	if len(page.Events) < 4 || page.Events[0].Type != domain.TypeExecutionRequested {
		t.Fatalf("events of %s: %+v", id, page.Events)
	}
	req := page.Events[0]
	var then projections.ExecutionView
	e.mustJSON("GET", fmt.Sprintf("/api/v1/executions/%s?as_of=%d", id, req.Position), nil, http.StatusOK, &then)
	if then.Status != domain.StatusRequested || then.Position != req.Position {
		t.Errorf("as of its request: %s at %d, want requested at %d", then.Status, then.Position, req.Position)
	}
	e.mustJSON("GET", "/api/v1/executions/"+id+"?as_of="+final.EndedAt.Format(time.RFC3339Nano), nil, http.StatusOK, &then)
	if then.Status != domain.StatusCompleted {
		t.Errorf("as of its end time: %s", then.Status)
	}
	if st, _, _ := e.do("GET", fmt.Sprintf("/api/v1/executions/%s?as_of=%d", id, req.Position-1), nil); st != http.StatusNotFound {
		t.Errorf("as of before its request: %d, want 404", st)
	}
	var q projections.QueueContents
	e.mustJSON("GET", fmt.Sprintf("/api/v1/actions/asof.echo/queue?as_of=%d", req.Position), nil, http.StatusOK, &q)
	if len(q.Waiting) != 1 || q.Waiting[0].ID != id {
		t.Errorf("queue as of the request: %+v", q)
	}
	if st, _, _ := e.do("GET", "/api/v1/executions/"+id+"?as_of=yesterday", nil); st != http.StatusBadRequest {
		t.Errorf("as_of=yesterday: %d, want 400", st)
	}
}

func TestCancelAndPauseThroughTheAPI(t *testing.T) {
	e := newE2E(t)
	e.define("c.sleep", "core.sleep", 1)
	running := e.request("c.sleep", map[string]any{"seconds": 30})
	e.waitStatus(running, domain.StatusRunning)
	waiting := e.request("c.sleep", map[string]any{"seconds": 0.01})

	e.mustJSON("POST", "/api/v1/executions/"+waiting+"/cancel", map[string]any{"reason": "not needed"}, http.StatusAccepted, nil)
	v := e.waitStatus(waiting, domain.StatusCancelled)
	if !strings.Contains(v.Error, "not needed") || v.Code != "cancel_requested" {
		t.Errorf("cancelled waiter's reason = %q, code %q; want the client's, cancel_requested", v.Error, v.Code)
	}
	e.mustJSON("POST", "/api/v1/executions/"+running+"/cancel", nil, http.StatusAccepted, nil)
	if v := e.waitStatus(running, domain.StatusCancelled); v.Code != "cancel_requested" {
		t.Errorf("cancelled while running: code %q, want cancel_requested", v.Code)
	}
	if st, _, b := e.do("POST", "/api/v1/executions/"+running+"/cancel", nil); st != http.StatusConflict {
		t.Errorf("cancelling an ended execution: %d %s, want 409", st, b)
	}
	if st, _, _ := e.do("POST", "/api/v1/executions/no-such-id/cancel", nil); st != http.StatusNotFound {
		t.Errorf("cancelling an unknown execution: %d, want 404", st)
	}

	// Pause holds grants; resume lets them go.
	e.mustJSON("POST", "/api/v1/actions/c.sleep/pause", map[string]any{"reason": "maintenance"}, http.StatusOK, nil)
	held := e.request("c.sleep", map[string]any{"seconds": 0.01})
	time.Sleep(300 * time.Millisecond) // a grant would have happened by now; the log is checked below
	var st projections.QueueStats
	e.mustJSON("GET", "/api/v1/actions/c.sleep/queue-stats", nil, http.StatusOK, &st)
	if !st.Paused || st.QueueLength != 1 || st.ActiveCount != 0 {
		t.Errorf("paused queue: %+v", st)
	}
	// Its place in the queue is queue_place, and position (its name before
	// issue 35) still says the same.
	var why map[string]any
	e.mustJSON("GET", "/api/v1/executions/"+held+"/explain", nil, http.StatusOK, &why)
	if why["queue_place"] != 1.0 || why["position"] != 1.0 || why["ahead"] != 0.0 {
		t.Errorf("explain of the one paused waiter: %v, want queue_place and position 1, ahead 0", why)
	}
	e.mustJSON("POST", "/api/v1/actions/c.sleep/resume", nil, http.StatusOK, nil)
	e.waitStatus(held, domain.StatusCompleted)
	rep, err := projections.Audit(context.Background(), e.store, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Errorf("audit: %+v", rep.Violations)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	e := newE2E(t)
	e.define("bad.noop", "core.noop", 1)
	head, _ := e.store.Head(context.Background())
	cases := []struct {
		method, path string
		body         string
		status       int
	}{
		{"POST", "/api/v1/executions", `{"action":"bad.noop"`, 400},
		{"POST", "/api/v1/executions", `{"action":"bad.noop","extra":1}`, 400},
		{"POST", "/api/v1/executions", `{"action":"nope"}`, 404},
		{"POST", "/api/v1/executions", `{"action":"bad.noop","input":[1]}`, 400},
		{"POST", "/api/v1/executions", `{"action":"bad.noop"} {}`, 400},
		{"POST", "/api/v1/executions", `{"action":"bad.noop","input":{"s":"` + strings.Repeat("x", 2<<20) + `"}}`, 413},
		{"POST", "/api/v1/actions", `{"ref":"x y","runner":"core.noop"}`, 400},
		{"POST", "/api/v1/actions", `{"ref":"bad.noop","runner":"core.sleep"}`, 409},
		{"PUT", "/api/v1/actions/nope/policy", `{"runner":"core.noop"}`, 404},
		{"POST", "/api/v1/actions/nope/pause", "", 404},
		{"POST", "/api/v1/actions/nope/resume", "", 404},
		{"GET", "/api/v1/executions?status=sleeping", "", 400},
		{"GET", "/api/v1/executions?limt=3", "", 400},
		{"GET", "/api/v1/executions/" + strings.Repeat("a", 101), "", 400},
		{"GET", "/api/v1/events?from=-1", "", 400},
		{"DELETE", "/api/v1/actions", "", 405},
		{"GET", "/api/v1/actions/../executions", "", 404},
		{"POST", "/api/v1/actions//pause", "", 404},
	}
	for _, c := range cases {
		st, h, b := e.do(c.method, c.path, c.body)
		if st != c.status {
			t.Errorf("%s %s %.60s: %d %s, want %d", c.method, c.path, c.body, st, b, c.status)
			continue
		}
		var p api.Problem
		if err := json.Unmarshal(b, &p); err != nil || h.Get("Content-Type") != "application/problem+json" || p.Detail == "" || p.Status != st {
			t.Errorf("%s %s: not a problem document: %s %s", c.method, c.path, h.Get("Content-Type"), b)
		}
	}
	if after, _ := e.store.Head(context.Background()); after != head {
		t.Errorf("bad input appended %d events", after-head)
	}
}

func TestWithItemsThroughTheAPI(t *testing.T) {
	e := newE2E(t)
	e.define("items.echo", "core.echo", 3)
	items := []any{map[string]any{"n": 1}, map[string]any{"n": 2}, map[string]any{"n": 3}, map[string]any{"n": 4}, "five"}
	var acc struct{ ID string }
	e.mustJSON("POST", "/api/v1/executions", map[string]any{"action": "items.echo", "input": map[string]any{"base": true},
		"with_items": items, "concurrency": 2}, http.StatusAccepted, &acc)
	parent := e.waitStatus(acc.ID, domain.StatusCompleted)
	if len(parent.Children) != len(items) {
		t.Fatalf("parent lists %d children, want %d: %+v", len(parent.Children), len(items), parent)
	}
	var list struct{ Executions []projections.ExecutionView }
	e.mustJSON("GET", "/api/v1/executions?parent="+acc.ID, nil, http.StatusOK, &list)
	if len(list.Executions) != len(items) {
		t.Fatalf("?parent= lists %d executions, want %d", len(list.Executions), len(items))
	}
	for i, x := range list.Executions { // newest first: the last item first
		want := parent.Children[len(items)-1-i]
		if x.ID != want || x.Status != domain.StatusCompleted || x.Parent != acc.ID {
			t.Errorf("child %d: %s %s parent %s, want %s completed", i, x.ID, x.Status, x.Parent, want)
		}
	}
	var first projections.ExecutionView
	e.mustJSON("GET", "/api/v1/executions/"+parent.Children[0], nil, http.StatusOK, &first)
	if string(first.Result) != `{"base":true,"n":1}` {
		t.Errorf("first child's result = %s, want the item merged over the input", first.Result)
	}
	if st, _, b := e.do("POST", "/api/v1/executions", `{"action":"items.echo","with_items":[]}`); st != http.StatusBadRequest {
		t.Errorf("empty with_items: %d %s", st, b)
	}
	if st, _, b := e.do("POST", "/api/v1/executions", `{"action":"items.echo","concurrency":2}`); st != http.StatusBadRequest {
		t.Errorf("concurrency without with_items: %d %s", st, b)
	}
}

// TestForgottenExecutionsAreServedFromTheLog: with a retention, an ended
// execution the read model forgot is left out of lists but still answered
// by GET (a fold of its stream), and the rebuild compares equal.
func TestForgottenExecutionsAreServedFromTheLog(t *testing.T) {
	t.Parallel()
	e := newE2ERetaining(t, 2)
	e.define("retain.echo", "core.echo", 1)
	var ids []string
	for i := range 5 {
		id := e.request("retain.echo", map[string]any{"i": i})
		e.waitStatus(id, domain.StatusCompleted)
		ids = append(ids, id)
	}
	var page struct {
		Executions []projections.ExecutionView `json:"executions"`
	}
	e.mustJSON("GET", "/api/v1/executions?action=retain.echo", nil, http.StatusOK, &page)
	if len(page.Executions) != 2 || page.Executions[0].ID != ids[4] || page.Executions[1].ID != ids[3] {
		t.Errorf("the list holds %d executions, want the 2 most recently ended", len(page.Executions))
	}
	var first projections.ExecutionView
	e.mustJSON("GET", "/api/v1/executions/"+ids[0], nil, http.StatusOK, &first)
	if first.ID != ids[0] || first.Status != domain.StatusCompleted || string(first.Result) != `{"i":0}` {
		t.Errorf("a forgotten execution: %+v", first)
	}
	if code, _, _ := e.do("GET", "/api/v1/executions/no-such-execution", nil); code != http.StatusNotFound {
		t.Errorf("an unknown execution: %d, want 404", code)
	}
	var rebuild struct {
		Equal       bool     `json:"equal"`
		Differences []string `json:"differences"`
	}
	e.mustJSON("POST", "/api/v1/admin/rebuild", nil, http.StatusOK, &rebuild)
	if !rebuild.Equal {
		t.Errorf("rebuild with the same retention: %v", rebuild.Differences)
	}
}
