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
)

func newClient(t *testing.T, url, token string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, append([]client.Option{client.WithToken(token)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "127.0.0.1:8080", "ftp://x", "http://", "http://x/?a=1", "://"} {
		if _, err := client.New(bad); err == nil {
			t.Errorf("New(%q): no error", bad)
		}
	}
	c, err := client.New("https://example.com/turnstile/")
	if err != nil || c.BaseURL() != "https://example.com/turnstile" {
		t.Errorf("New with a prefix: %v, %v", c, err)
	}
}

func TestActions(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c := newClient(t, newServer(t), adminToken)

	p := wire.Policy{Ref: "demo.sleep", Runner: "core.sleep", MaxConcurrent: 2, RateLimit: &wire.RateLimit{Count: 100, PerSeconds: 2}}
	a, created, err := c.DefineAction(ctx, p)
	if err != nil || !created || a.Ref != "demo.sleep" || a.MaxConcurrent != 2 || a.RateLimit == nil || a.RateLimit.Count != 100 || a.MaxQueueLength == 0 {
		t.Fatalf("DefineAction: %+v created %v, %v", a, created, err)
	}
	if _, created, err := c.DefineAction(ctx, p); err != nil || created {
		t.Errorf("DefineAction again: created %v, %v", created, err)
	}
	_, _, err = c.DefineAction(ctx, wire.Policy{Ref: "demo.sleep", Runner: "core.noop"})
	if prob := client.AsProblem(err); !client.IsConflict(err) || prob.Type != client.ProblemConflict || !strings.Contains(prob.Detail, "different policy") {
		t.Errorf("DefineAction with another policy: %v", err)
	}

	a, err = c.PauseAction(ctx, "demo.sleep", "maintenance")
	if err != nil || !a.Paused {
		t.Errorf("PauseAction: %+v, %v", a, err)
	}
	if a, err = c.ResumeAction(ctx, "demo.sleep"); err != nil || a.Paused {
		t.Errorf("ResumeAction: %+v, %v", a, err)
	}
	a.Policy.MaxConcurrent = 5
	if a, err = c.SetPolicy(ctx, "demo.sleep", a.Policy); err != nil || a.MaxConcurrent != 5 || a.Runner != "core.sleep" {
		t.Errorf("SetPolicy: %+v, %v", a, err)
	}
	if got, err := c.Action(ctx, "demo.sleep"); err != nil || got.MaxConcurrent != 5 || got.Version != a.Version {
		t.Errorf("Action: %+v, %v (want version %d)", got, err, a.Version)
	}
	if _, _, err := c.DefineAction(ctx, wire.Policy{Ref: "demo.echo", Runner: "core.echo"}); err != nil {
		t.Fatal(err)
	}
	list, err := c.Actions(ctx)
	if err != nil || len(list) != 2 || list[0].Ref != "demo.echo" || list[1].Ref != "demo.sleep" {
		t.Errorf("Actions: %+v, %v", list, err)
	}

	_, err = c.Action(ctx, "nope")
	var prob *client.Problem
	if !errors.As(err, &prob) || prob.Status != 404 || prob.Type != client.ProblemNotFound || prob.Title != "Not Found" ||
		prob.Detail != `action "nope" is not defined` || !client.IsNotFound(err) {
		t.Errorf("Action of an undefined ref: %#v", err)
	}
	if _, err := c.PauseAction(ctx, "nope", ""); !client.IsNotFound(err) {
		t.Errorf("PauseAction of an undefined ref: %v", err)
	}
	if _, err := c.SetPolicy(ctx, "demo.sleep", wire.Policy{Ref: "other", Runner: "core.noop"}); !client.IsInvalid(err) {
		t.Errorf("SetPolicy with another ref: %v", err)
	}
}

func TestExecutions(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c := newClient(t, newServer(t), adminToken)
	if _, _, err := c.DefineAction(ctx, wire.Policy{Ref: "demo.sleep", Runner: "core.sleep", MaxConcurrent: 4}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.DefineAction(ctx, wire.Policy{Ref: "demo.fail", Runner: "core.fail"}); err != nil {
		t.Fatal(err)
	}

	// The same idempotency key answers the same execution; with another
	// body it is a conflict.
	req := wire.ExecutionRequest{Action: "demo.sleep", Input: json.RawMessage(`{"seconds":0.02}`)}
	first, err := c.RequestExecution(ctx, req, client.WithIdempotencyKey("k-1"))
	if err != nil || first.ID == "" || first.Status != "requested" || first.Replayed {
		t.Fatalf("RequestExecution: %+v, %v", first, err)
	}
	again, err := c.RequestExecution(ctx, req, client.WithIdempotencyKey("k-1"))
	if err != nil || again.ID != first.ID || !again.Replayed {
		t.Errorf("RequestExecution with the same key: %+v, %v (want %s, replayed)", again, err, first.ID)
	}
	_, err = c.RequestExecution(ctx, wire.ExecutionRequest{Action: "demo.sleep", Input: json.RawMessage(`{"seconds":1}`)}, client.WithIdempotencyKey("k-1"))
	if !client.IsConflict(err) || client.AsProblem(err).Type != client.ProblemIdempotency {
		t.Errorf("the key with another body: %v", err)
	}

	x, err := c.Wait(ctx, first.ID)
	if err != nil || x.Status != "completed" || string(x.Result) != `{"slept_seconds":0.02}` || x.EndedAt == nil {
		t.Fatalf("Wait: %+v, %v", x, err)
	}
	// Waiting for an ended execution answers at once.
	if x2, err := c.Wait(ctx, first.ID); err != nil || x2.Status != "completed" {
		t.Errorf("Wait again: %+v, %v", x2, err)
	}

	// as of its first event, it was requested; before, it did not exist.
	evs, err := c.ExecutionEvents(ctx, first.ID, 0, 0)
	var types []string
	for _, e := range evs.Events {
		types = append(types, e.Type)
	}
	if err != nil || strings.Join(types, " ") != "execution.requested execution.scheduling execution.scheduled execution.running execution.completed" {
		t.Fatalf("ExecutionEvents: %v, %v", types, err)
	}
	if page, err := c.ExecutionEvents(ctx, first.ID, 3, 1); err != nil || len(page.Events) != 1 || page.Events[0].Type != "execution.running" || page.Next != 4 {
		t.Errorf("ExecutionEvents from 3, limit 1: %+v, %v", page, err)
	}
	requestedAt := evs.Events[0].Position
	if then, err := c.Execution(ctx, first.ID, client.AsOf(strconv.FormatUint(requestedAt, 10))); err != nil || then.Status != "requested" {
		t.Errorf("Execution as of %d: %+v, %v", requestedAt, then, err)
	}
	if requestedAt > 0 {
		if _, err := c.Execution(ctx, first.ID, client.AsOf(strconv.FormatUint(requestedAt-1, 10))); !client.IsNotFound(err) {
			t.Errorf("Execution as of before its request: %v", err)
		}
	}

	// A failure is an end too.
	failed, err := c.RequestExecution(ctx, wire.ExecutionRequest{Action: "demo.fail", Input: json.RawMessage(`{"message":"boom"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if x, err := c.Wait(ctx, failed.ID); err != nil || x.Status != "failed" || x.Error != "boom" {
		t.Errorf("Wait of core.fail: %+v, %v", x, err)
	}

	// Wait gives up with the context, and says how far it got; a
	// cancellation ends the execution.
	sleeper, err := c.RequestExecution(ctx, wire.ExecutionRequest{Action: "demo.sleep", Input: json.RawMessage(`{"seconds":60}`)})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	x, err = c.Wait(short, sleeper.ID)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || x.ID != sleeper.ID || client.Terminal(x.Status) {
		t.Errorf("Wait past its deadline: %+v, %v", x, err)
	}
	if acc, err := c.Cancel(ctx, sleeper.ID, "enough"); err != nil || acc.ID != sleeper.ID {
		t.Errorf("Cancel: %+v, %v", acc, err)
	}
	if x, err := c.Wait(ctx, sleeper.ID); err != nil || x.Status != "cancelled" || !x.CancelAsked {
		t.Errorf("Wait of a cancelled execution: %+v, %v", x, err)
	}
	if _, err := c.Cancel(ctx, sleeper.ID, ""); !client.IsConflict(err) || client.AsProblem(err).Type != client.ProblemAlreadyEnded {
		t.Errorf("Cancel of an ended execution: %v", err)
	}

	// Lists, newest first, paged.
	want := []string{sleeper.ID, first.ID}
	page, err := c.Executions(ctx, client.ListOptions{Action: "demo.sleep", Limit: 1})
	if err != nil || len(page.Executions) != 1 || page.Executions[0].ID != want[0] || page.Next == "" {
		t.Fatalf("Executions limit 1: %+v, %v", page, err)
	}
	var got []string
	for x, err := range c.AllExecutions(ctx, client.ListOptions{Action: "demo.sleep", Limit: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, x.ID)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("AllExecutions: %v, want %v", got, want)
	}
	if page, err := c.Executions(ctx, client.ListOptions{Status: "failed"}); err != nil || len(page.Executions) != 1 || page.Executions[0].ID != failed.ID {
		t.Errorf("Executions status failed: %+v, %v", page, err)
	}
	if _, err := c.Executions(ctx, client.ListOptions{Status: "bogus"}); !client.IsInvalid(err) || client.AsProblem(err).Type != client.ProblemInvalid {
		t.Errorf("Executions status bogus: %v", err)
	}

	for name, err := range map[string]error{
		"Execution":        func() error { _, err := c.Execution(ctx, "nope"); return err }(),
		"Wait":             func() error { _, err := c.Wait(ctx, "nope"); return err }(),
		"Cancel":           func() error { _, err := c.Cancel(ctx, "nope", ""); return err }(),
		"Explain":          func() error { _, err := c.Explain(ctx, "nope"); return err }(),
		"ExecutionEvents":  func() error { _, err := c.ExecutionEvents(ctx, "nope", 0, 0); return err }(),
		"RequestExecution": func() error { _, err := c.RequestExecution(ctx, wire.ExecutionRequest{Action: "no.such"}); return err }(),
	} {
		if !client.IsNotFound(err) {
			t.Errorf("%s of something unknown: %v, want a 404", name, err)
		}
	}
}

func TestWithItems(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c := newClient(t, newServer(t), adminToken)
	if _, _, err := c.DefineAction(ctx, wire.Policy{Ref: "demo.items", Runner: "core.echo", MaxConcurrent: 4}); err != nil {
		t.Fatal(err)
	}
	req, err := c.RequestExecution(ctx, wire.ExecutionRequest{Action: "demo.items", Input: json.RawMessage(`{"a":1}`),
		WithItems: []json.RawMessage{json.RawMessage(`{"b":1}`), json.RawMessage(`{"b":2}`), json.RawMessage(`{}`)}, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	parent, err := c.Wait(ctx, req.ID)
	if err != nil || parent.Status != "completed" || len(parent.Children) != 3 || parent.Concurrency != 2 {
		t.Fatalf("Wait of a with_items parent: %+v, %v", parent, err)
	}
	child, err := c.Execution(ctx, parent.Children[1])
	if err != nil || child.Parent != req.ID || string(child.Result) != `{"a":1,"b":2}` {
		t.Errorf("child 1: %+v, %v", child, err)
	}
}

func TestQueues(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c := newClient(t, newServer(t), adminToken)
	if _, _, err := c.DefineAction(ctx, wire.Policy{Ref: "demo.noop", Runner: "core.noop", MaxConcurrent: 3, MaxQueueLength: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PauseAction(ctx, "demo.noop", ""); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 2 {
		r, err := c.RequestExecution(ctx, wire.ExecutionRequest{Action: "demo.noop"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	// A full queue refuses: 429 (early, once the read model holds both
	// waiters).
	for deadline := time.Now().Add(30 * time.Second); ; {
		st, err := c.QueueStats(ctx, "demo.noop")
		if err == nil && st.QueueLength == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue does not hold both waiters after 30s: %+v, %v", st, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, err := c.RequestExecution(ctx, wire.ExecutionRequest{Action: "demo.noop"})
	if !client.IsRateLimited(err) || client.AsProblem(err).Type != client.ProblemQueueFull {
		t.Errorf("a request to a full queue: %v", err)
	}
	q, err := c.Queue(ctx, "demo.noop")
	if err != nil || !q.Paused || len(q.Waiting) != 2 || q.Waiting[0].ID != ids[0] || q.Waiting[1].ID != ids[1] || len(q.Active) != 0 {
		t.Errorf("Queue of a paused action: %+v, %v", q, err)
	}
	st, err := c.QueueStats(ctx, "demo.noop")
	if err != nil || st.QueueLength != 2 || st.MaxConcurrent != 3 || !st.Paused || st.TotalEnqueued != 2 {
		t.Errorf("QueueStats: %+v, %v", st, err)
	}
	// As of the stats' position minus the last request, one waited.
	if then, err := c.Queue(ctx, "demo.noop", client.AsOf(strconv.FormatUint(q.Waiting[1].Position-1, 10))); err != nil || len(then.Waiting) != 1 {
		t.Errorf("Queue as of before the second request: %+v, %v", then, err)
	}
	if _, err := c.ResumeAction(ctx, "demo.noop"); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if x, err := c.Wait(ctx, id); err != nil || x.Status != "completed" {
			t.Errorf("Wait %s: %+v, %v", id, x, err)
		}
	}
	all, err := c.AllQueueStats(ctx)
	if err != nil || len(all.QueueStats) != 1 || all.QueueStats[0].Action != "demo.noop" || all.Position == 0 {
		t.Errorf("AllQueueStats: %+v, %v", all, err)
	}
	if _, err := c.QueueStats(ctx, "nope"); !client.IsNotFound(err) {
		t.Errorf("QueueStats of an undefined action: %v", err)
	}
	workers, err := c.Workers(ctx)
	if err != nil || len(workers) != 2 || workers[0].Status == "" || workers[0].Slots != 8 {
		t.Errorf("Workers: %+v, %v", workers, err)
	}
}

func TestReplay(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c := newClient(t, newServer(t), adminToken)
	if _, _, err := c.DefineAction(ctx, wire.Policy{Ref: "demo.noop", Runner: "core.noop"}); err != nil {
		t.Fatal(err)
	}
	r, err := c.RequestExecution(ctx, wire.ExecutionRequest{Action: "demo.noop"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	// Pages of two walk the log without a gap.
	var byPages []uint64
	for from := uint64(0); ; {
		page, err := c.Events(ctx, from, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Events) > 2 {
			t.Fatalf("a page of limit 2 holds %d events", len(page.Events))
		}
		for _, e := range page.Events {
			byPages = append(byPages, e.Position)
		}
		if len(page.Events) == 0 {
			break
		}
		from = page.Next
	}
	var all []uint64
	for e, err := range c.AllEvents(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, e.Position)
	}
	if len(all) < 6 || len(all) != len(byPages) {
		t.Fatalf("AllEvents: %v; by pages of 2: %v", all, byPages)
	}
	for i := range all {
		if all[i] != uint64(i) || byPages[i] != uint64(i) {
			t.Fatalf("positions %v and %v, want 0…%d", all, byPages, len(all)-1)
		}
	}
	s, err := c.Stream(ctx, "execution-"+r.ID, 1, 0)
	if err != nil || len(s.Events) != 4 || s.Events[0].Version != 1 || s.Events[0].Stream != "execution-"+r.ID {
		t.Errorf("Stream from version 1: %+v, %v", s, err)
	}
	if _, err := c.Stream(ctx, "execution-nope", 0, 0); !client.IsNotFound(err) {
		t.Errorf("Stream of an unknown stream: %v", err)
	}
}

func TestAuthProblems(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	srv := newServer(t)
	anonymous, err := client.New(srv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anonymous.Actions(ctx); !client.IsUnauthorized(err) || client.AsProblem(err).Type != client.ProblemUnauthorized {
		t.Errorf("no token: %v", err)
	}
	if _, err := newClient(t, srv, "wrong-token-0123456789").Actions(ctx); !client.IsUnauthorized(err) {
		t.Errorf("a wrong token: %v", err)
	}
	reader := newClient(t, srv, readerToken)
	if _, _, err := reader.DefineAction(ctx, wire.Policy{Ref: "x", Runner: "core.noop"}); !client.IsForbidden(err) || client.AsProblem(err).Type != client.ProblemForbidden {
		t.Errorf("a reader defining an action: %v", err)
	}
	if list, err := reader.Actions(ctx); err != nil || len(list) != 0 {
		t.Errorf("a reader listing actions: %v, %v", list, err)
	}
	// Health and readiness are public.
	if h, err := anonymous.Health(ctx); err != nil || h.Status != "ok" || h.Version != "test" {
		t.Errorf("Health: %+v, %v", h, err)
	}
	if r, err := anonymous.Ready(ctx); err != nil || !r.Ready || r.Status != "ready" {
		t.Errorf("Ready: %+v, %v", r, err)
	}
	// Invalid: a bad ref.
	_, _, err = newClient(t, srv, adminToken).DefineAction(ctx, wire.Policy{Ref: "bad ref", Runner: "core.noop"})
	if !client.IsInvalid(err) || client.IsNotFound(err) {
		t.Errorf("a bad ref: %v", err)
	}
	// Raw: the server's JSON as it wrote it.
	raw, err := newClient(t, srv, adminToken).Raw(ctx, "GET", "/api/v1/executions?limit=1", nil)
	if err != nil || !json.Valid(raw) || !strings.Contains(string(raw), `"executions":[]`) {
		t.Errorf("Raw: %s, %v", raw, err)
	}
}

// TestProblemFromAnythingElse reads answers that are not problem documents:
// a proxy's text page, a readiness that is not ready, a rate limit's
// Retry-After; and checks what the client sends.
func TestProblemFromAnythingElse(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen http.Header
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = r.Header.Clone()
		mu.Unlock()
		switch r.URL.Path {
		case "/readyz":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"status":"catching up","position":3,"head":9,"lag":6}`)
		case "/api/v1/executions/x/explain":
			_, _ = io.WriteString(w, `{"status":"requested","position":2,"ahead":1,"waiting_for":["slot","paused"]}`)
		case "/api/v1/executions":
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"type":"`+client.ProblemRateLimited+`","title":"Too Many Requests","status":429,"detail":"rate limit"}`)
		default:
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "upstream is down\nmore text")
		}
	}))
	t.Cleanup(fake.Close)
	ctx := testCtx(t)
	c := newClient(t, fake.URL, "tok", client.WithUserAgent("test-agent"), client.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}))

	r, err := c.Ready(ctx)
	if err != nil || r.Ready || r.Status != "catching up" || r.Lag != 6 {
		t.Errorf("Ready of a server catching up: %+v, %v", r, err)
	}
	mu.Lock()
	if seen.Get("Authorization") != "Bearer tok" || seen.Get("User-Agent") != "test-agent" {
		t.Errorf("request headers: %v", seen)
	}
	mu.Unlock()
	_, err = c.Actions(ctx)
	p := client.AsProblem(err)
	if p == nil || p.Status != 502 || p.Type != "about:blank" || p.Title != "Bad Gateway" || p.Detail != "upstream is down" {
		t.Errorf("a proxy's text answer: %#v", err)
	}
	_, err = c.RequestExecution(ctx, wire.ExecutionRequest{Action: "a"})
	if p := client.AsProblem(err); !client.IsRateLimited(err) || p.RetryAfter != 3*time.Second || p.Type != client.ProblemRateLimited {
		t.Errorf("a rate limit: %#v", err)
	}
	// Explain, as a server before queue_place answers it (position alone).
	if e, err := c.Explain(ctx, "x"); err != nil || e.Status != "requested" || e.QueuePlace != 2 || e.Ahead != 1 || strings.Join(e.WaitingFor, ",") != "slot,paused" {
		t.Errorf("Explain: %+v, %v", e, err)
	}
	if got := err.Error(); got != "429 Too Many Requests: rate limit" {
		t.Errorf("Problem.Error: %q", got)
	}
}

// Log answers where the log stands, with the digest of its last event (the
// memory store keeps the chain); a token is needed.
func TestLog(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	srv := newServer(t)
	admin := newClient(t, srv, adminToken)
	if _, _, err := admin.DefineAction(ctx, wire.Policy{Ref: "log.demo", Runner: "core.noop"}); err != nil {
		t.Fatal(err)
	}
	st, err := newClient(t, srv, readerToken).Log(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Head == 0 || st.FirstLivePosition != 0 || st.ArchivedSegments != 0 || st.Digest == nil ||
		st.Digest.Position != st.Head-1 || len(st.Digest.Hash) != 64 {
		t.Fatalf("Log = %+v", st)
	}
	anonymous, err := client.New(srv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anonymous.Log(ctx); !client.IsUnauthorized(err) {
		t.Fatalf("no token: %v", err)
	}
}

// TestWorkersFollowsPages: Workers returns every listed worker, however
// many pages the server cuts them into (100 a page by default).
func TestWorkersFollowsPages(t *testing.T) {
	t.Parallel()
	url, stop, err := startServerWith(230)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	ctx := testCtx(t)
	c := newClient(t, url, readerToken)
	var workers []wire.Worker
	for deadline := time.Now().Add(20 * time.Second); len(workers) != 230 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if workers, err = c.Workers(ctx, client.AllWorkers()); err != nil {
			t.Fatal(err)
		}
	}
	if len(workers) != 230 {
		t.Fatalf("Workers: %d workers, want 230", len(workers))
	}
	for i := 1; i < len(workers); i++ {
		if workers[i-1].ID >= workers[i].ID {
			t.Fatalf("Workers: %s before %s", workers[i-1].ID, workers[i].ID)
		}
	}
}
