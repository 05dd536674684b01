package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/internal/waitfor"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
)

// outageStore is a store whose calls fail as a database outage does while
// down is set.
type outageStore struct {
	eventstore.Store
	down atomic.Bool
}

func (s *outageStore) AtomicMultiStream() bool { return eventstore.AtomicMultiStream(s.Store) }

func (s *outageStore) err() error {
	return fmt.Errorf("%w: dial tcp 127.0.0.1:5432: connect: connection refused", eventstore.ErrUnavailable)
}

func (s *outageStore) AppendMulti(ctx context.Context, a ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	if s.down.Load() {
		return eventstore.AppendResult{}, s.err()
	}
	return s.Store.(interface {
		AppendMulti(context.Context, ...eventstore.StreamAppend) (eventstore.AppendResult, error)
	}).AppendMulti(ctx, a...)
}

func (s *outageStore) Append(ctx context.Context, stream string, exp eventstore.ExpectedVersion, evs ...domain.Envelope) (eventstore.AppendResult, error) {
	if s.down.Load() {
		return eventstore.AppendResult{}, s.err()
	}
	return s.Store.Append(ctx, stream, exp, evs...)
}

func (s *outageStore) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]domain.Envelope, error) {
	if s.down.Load() {
		return nil, s.err()
	}
	return s.Store.ReadStream(ctx, stream, from, limit)
}

func (s *outageStore) ReadAll(ctx context.Context, from uint64, limit int) ([]domain.Envelope, error) {
	if s.down.Load() {
		return nil, s.err()
	}
	return s.Store.ReadAll(ctx, from, limit)
}

func (s *outageStore) Head(ctx context.Context) (uint64, error) {
	if s.down.Load() {
		return 0, s.err()
	}
	return s.Store.Head(ctx)
}

// TestStoreOutageAnswers503: while the store cannot be reached, every call
// that needs it answers 503 with Retry-After and a problem document,
// /readyz says not ready, and nothing answers an empty body; once it is
// back, they succeed again.
func TestStoreOutageAnswers503(t *testing.T) {
	mem := memstore.New(memstore.Options{})
	store := &outageStore{Store: mem}
	views := projections.NewViews()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = views.Run(ctx, mem) }()
	cmds := &command.Service{Store: store, Writer: "test"}
	if _, err := cmds.DefineAction(ctx, domain.Policy{Ref: "demo", Runner: "core.noop", MaxConcurrent: 2}); err != nil {
		t.Fatal(err)
	}
	srv := api.New(api.Config{Commands: cmds, Queries: projections.NewQueries(views, store), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	h := srv.Handler()
	calls := []struct{ method, path, query, body string }{
		{"POST", "/api/v1/executions", "", `{"action":"demo","input":{}}`},
		{"POST", "/api/v1/actions", "", `{"ref":"demo.two","runner":"core.noop"}`},
		{"POST", "/api/v1/actions/demo/pause", "", ""},
		{"GET", "/api/v1/events", "from=0", ""},
		{"GET", "/api/v1/streams/action-demo", "", ""},
		{"GET", "/readyz", "", ""},
	}
	store.down.Store(true)
	for _, c := range calls {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, request(c.method, c.path, c.query, c.body))
		var p api.Problem
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" ||
			json.Unmarshal(rec.Body.Bytes(), &p) != nil || p.Status != http.StatusServiceUnavailable {
			t.Errorf("%s %s during an outage: %d Retry-After %q %s", c.method, c.path, rec.Code, rec.Header().Get("Retry-After"), clipBody(rec.Body.String()))
		}
	}
	store.down.Store(false)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, request("POST", "/api/v1/executions", "", `{"action":"demo","input":{}}`))
	if rec.Code != http.StatusAccepted {
		t.Errorf("after the outage: %d %s", rec.Code, clipBody(rec.Body.String()))
	}
}

// TestCancelledRequestIsNeverEmpty: a request whose context has ended (the
// server stopping, or a part of it cancelling) gets a problem document,
// never an empty 200.
func TestCancelledRequestIsNeverEmpty(t *testing.T) {
	a, _ := startAPI(t, api.Config{})
	h := a.srv.Handler()
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/api/v1/executions", `{"action":"demo","input":{"seconds":1}}`},
		{"GET", "/api/v1/events", ""},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req := request(c.method, c.path, "from=0", c.body).WithContext(ctx)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Body.Len() == 0 || (rec.Code < 300 && !json.Valid(rec.Body.Bytes())) {
			t.Errorf("%s %s with its context ended: %d and body %q", c.method, c.path, rec.Code, rec.Body.String())
		}
	}
}

// TestFeedCaps: a token (or an address without one) may hold
// MaxFeedsPerToken feeds, and the server MaxFeeds in all; one more gets a
// 429 problem with Retry-After, and a closed feed frees its slot.
func TestFeedCaps(t *testing.T) {
	a, _ := startAPI(t, api.Config{MaxFeeds: 3, MaxFeedsPerToken: 2, FeedHeartbeat: 50 * time.Millisecond})
	ts := httptest.NewServer(a.srv.Handler())
	defer ts.Close()
	open := func(token string) (*http.Response, context.CancelFunc) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/api/v1/feeds/events?from=0", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, cancel
	}
	refused := func(what string, resp *http.Response) {
		t.Helper()
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !bytes.Contains(body, []byte("too-many-feeds")) {
			t.Errorf("%s: %d Retry-After %q %s", what, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	a1, c1 := open("alice")
	_, c2 := open("alice")
	defer c2()
	if a1.StatusCode != 200 {
		t.Fatalf("first feed: %d", a1.StatusCode)
	}
	r, c := open("alice")
	refused("a third feed of one token", r)
	c()
	_, c3 := open("bob")
	defer c3()
	r, c = open("carol")
	refused("a fourth feed in all", r)
	c()
	c1() // alice closes one: carol gets its slot
	a1.Body.Close()
	code := 0
	waitfor.That(t, "a closed feed to free its slot", func() bool {
		r, c := open("carol")
		defer c()
		code = r.StatusCode
		if code != 200 {
			r.Body.Close()
		}
		return code == 200
	}, waitfor.Note(func() string { return fmt.Sprintf("the last open answered %d", code) }))
}

// TestSlowFeedClientCut: a client of /feeds/events that stops reading is
// cut after FeedStallTimeout, the log names the last event it was sent,
// and it resumes from there with Last-Event-ID, missing nothing.
func TestSlowFeedClientCut(t *testing.T) {
	var logs syncBuffer
	a, _ := startAPI(t, api.Config{FeedStallTimeout: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()
	pad := strings.Repeat("p", 8000)
	for i := range 1500 { // ~12 MB of events: more than the socket buffers hold
		if _, _, err := a.cmds.Request(ctx, command.Request{Action: "demo", Input: []byte(fmt.Sprintf(`{"seconds":1,"pad":"%s%d"}`, pad, i))}); err != nil {
			t.Fatal(err)
		}
	}
	ts := httptest.NewServer(a.srv.Handler())
	defer ts.Close()
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	fmt.Fprintf(conn, "GET /api/v1/feeds/events?from=0 HTTP/1.1\r\nHost: localhost\r\n\r\n")
	// Read nothing until the server has cut the feed.
	waitfor.That(t, "a client that read nothing to be cut", func() bool { return strings.Contains(logs.String(), "feed client cut") },
		waitfor.Note(func() string { return "log:\n" + logs.String() }))
	line := logs.String()
	i := strings.Index(line, "last_event_id=")
	if i < 0 {
		t.Fatalf("the cut does not name the last event sent: %s", line)
	}
	var last uint64
	fmt.Sscanf(line[i+len("last_event_id="):], "%d", &last)
	// Resume after it: the next event is the one after.
	req, _ := http.NewRequest("GET", ts.URL+"/api/v1/feeds/events", nil)
	req.Header.Set("Last-Event-ID", fmt.Sprint(last))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			if id != fmt.Sprint(last+1) {
				t.Errorf("resumed at %s after %d", id, last)
			}
			return
		}
	}
	t.Fatal("the resumed feed sent nothing")
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
