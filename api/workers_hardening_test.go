package api_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/node"
	"github.com/turnstile/turnstile/services/remote"
)

// problemOf posts body with secret and returns the status and the problem's detail.
func (l *liveAPI) problemOf(t *testing.T, secret, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", l.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var p struct {
		Detail string `json:"detail"`
	}
	_ = json.Unmarshal(raw, &p)
	return resp.StatusCode, p.Detail
}

// TestWorkerNamesArePathSegments: a registration's name must be usable as
// the {name} of the session routes: one that is not is a 400 problem naming
// the allowed pattern, and nothing is written; a host name is a name.
func TestWorkerNamesArePathSegments(t *testing.T) {
	l := startLive(t, 15*time.Second, 0)
	h := l.head(t)
	for _, name := range []string{"a/b", "..", ".", "../admin", "a b", "a%2fb", "-x", "_x", "a?b", "a#b", "a\\b", "é", strings.Repeat("x", 101)} {
		body, _ := json.Marshal(wire.WorkerRegister{Name: name, Runners: []string{"x"}, Slots: 1})
		code, detail := l.problemOf(t, secrets[api.RoleWorker], "/api/v1/workers/register", string(body))
		if code != 400 || !strings.Contains(detail, "letters, digits, '_', '.' or '-'") || !strings.Contains(detail, "^[A-Za-z0-9]") {
			t.Errorf("register %q: %d %q, want 400 naming the pattern", name, code, detail)
		}
	}
	if got := l.head(t); got != h {
		t.Fatalf("refused registrations wrote %d events", got-h)
	}
	s := l.register(t, "host-1.example.com", `"x"`)
	if _, code := l.poll(t, s, `{"wait_seconds":0}`); code != 200 {
		t.Fatalf("poll as host-1.example.com: %d", code)
	}
}

// TestReportAfterEndMustBeTheSame: once a report ended an execution, the
// same report again is a retry (200, nothing written), whatever its
// spelling; one with another result is a 409 and writes nothing.
func TestReportAfterEndMustBeTheSame(t *testing.T) {
	l := startLive(t, 15*time.Second, 0)
	w := l.register(t, "w1", `"billing.charge"`)
	if code := l.post(t, secrets[api.RoleAdmin], "/api/v1/actions", `{"ref":"billing","runner":"billing.charge"}`, nil); code != 201 {
		t.Fatalf("define: %d", code)
	}
	ids := make([]string, 2)
	for i := range ids {
		var acc wire.Accepted
		if code := l.post(t, secrets[api.RoleClient], "/api/v1/executions", `{"action":"billing","input":{}}`, &acc); code != 202 {
			t.Fatalf("request: %d", code)
		}
		ids[i] = acc.ID
	}
	for got := 0; got < len(ids); {
		res, code := l.poll(t, w, `{"wait_seconds":10}`)
		if code != 200 {
			t.Fatalf("poll: %d", code)
		}
		got += len(res.Assignments)
	}
	completed, failed := ids[0], ids[1]
	if out, code := l.report(t, w, "w1", `{"execution":"`+completed+`","status":"completed","result":{"a":1,"b":[1,2]}}`); code != 200 || out.Status != "completed" {
		t.Fatalf("completed: %d %+v", code, out)
	}
	if out, code := l.report(t, w, "w1", `{"execution":"`+failed+`","status":"failed","error":"card declined"}`); code != 200 || out.Status != "failed" {
		t.Fatalf("failed: %d %+v", code, out)
	}
	h := l.head(t)
	for _, body := range []string{
		`{"execution":"` + completed + `","status":"completed","result":{"b":[1,2],"a":1}}`,
		`{"execution":"` + completed + `","status":"completed","result": { "a" : 1, "b" : [1, 2] } }`,
		`{"execution":"` + failed + `","status":"failed","error":"card declined"}`,
	} {
		if out, code := l.report(t, w, "w1", body); code != 200 || l.head(t) != h {
			t.Errorf("the same report again %s: %d %+v, %d events", body, code, out, l.head(t)-h)
		}
	}
	for _, body := range []string{
		`{"execution":"` + completed + `","status":"completed","result":{"a":2,"b":[1,2]}}`,
		`{"execution":"` + completed + `","status":"completed"}`,
		`{"execution":"` + completed + `","status":"completed","result":{"a":1,"b":[2,1]}}`,
		`{"execution":"` + failed + `","status":"failed","error":"insufficient funds"}`,
		`{"execution":"` + failed + `","status":"failed","error":"card declined","result":{"x":1}}`,
	} {
		if code, detail := l.problemOf(t, w.Session, "/api/v1/workers/w1/report", body); code != 409 || !strings.Contains(detail, "only the same report again is a retry") {
			t.Errorf("another report after the end %s: %d %q, want 409", body, code, detail)
		}
	}
	if got := l.head(t); got != h {
		t.Fatalf("refused reports wrote %d events", got-h)
	}
	if x := l.waitStatus(t, completed, "completed"); string(x.Result) != `{"a":1,"b":[1,2]}` {
		t.Errorf("the result: %s", x.Result)
	}
}

// startLiveRemote is startLive (no in-process worker) with the remote
// workers' config cfg and a log whose clock runs offset behind (the
// offset may change while it runs).
func startLiveRemote(t *testing.T, cfg remote.Config, offset *atomic.Int64) *liveAPI {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := memstore.New(memstore.Options{Clock: func() time.Time { return time.Now().Add(-time.Duration(offset.Load())) }})
	n, err := node.Start(ctx, store, node.Config{WorkerLease: 15 * time.Second, Logger: quiet, Workers: 0, Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	views := projections.NewViews()
	done := make(chan error, 1)
	go func() { done <- views.Run(ctx, store) }()
	cfg.Store, cfg.Logger = store, quiet
	rs, err := remote.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-rs.Started()
	srv := api.New(api.Config{Commands: n.Commands, Queries: projections.NewQueries(views, store), Remote: rs, Logger: quiet, Tokens: allTokens(t)})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		rs.Stop()
		n.Stop()
		cancel()
		<-done
		_ = store.Close()
	})
	return &liveAPI{url: hs.URL, store: store}
}

// workerPage answers GET /api/v1/workers?query as a reader.
func (l *liveAPI) workerPage(t *testing.T, query string) (wire.WorkerList, int) {
	t.Helper()
	req, _ := http.NewRequest("GET", l.url+"/api/v1/workers?"+query, nil)
	req.Header.Set("Authorization", "Bearer "+secrets[api.RoleReader])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out wire.WorkerList
	if resp.StatusCode == 200 {
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
	}
	return out, resp.StatusCode
}

// ids lists the workers' ids and statuses, "id:status".
func ids(ws []wire.Worker) []string {
	out := []string{}
	for _, w := range ws {
		out = append(out, w.ID+":"+w.Status)
	}
	return out
}

// TestWorkerNamesBoundedPerToken: one token holds live sessions for at
// most MaxNames names; another name beyond is a 429 problem and writes
// nothing; the same name again replaces its incarnation; another token
// has its own bound; a drained name frees its place.
func TestWorkerNamesBoundedPerToken(t *testing.T) {
	var offset atomic.Int64
	l := startLiveRemote(t, remote.Config{MaxNames: 3}, &offset)
	reg := func(secret, name string) (int, string) {
		return l.problemOf(t, secret, "/api/v1/workers/register", `{"name":"`+name+`","runners":["x"],"slots":1}`)
	}
	var sessions []wire.WorkerSession
	for _, name := range []string{"a", "b", "c"} {
		sessions = append(sessions, l.register(t, name, `"x"`))
	}
	h := l.head(t)
	if code, detail := reg(secrets[api.RoleWorker], "d"); code != 429 || !strings.Contains(detail, "3 worker names") {
		t.Fatalf("a fourth name: %d %q, want 429", code, detail)
	}
	if l.head(t) != h {
		t.Fatalf("the refused registration wrote %d events", l.head(t)-h)
	}
	if code, _ := reg(secrets[api.RoleWorker], "a"); code != 201 {
		t.Fatalf("a held name again: %d, want 201", code)
	}
	if code, _ := reg(secrets[api.RoleAdmin], "d"); code != 201 {
		t.Fatalf("another token: %d, want 201", code)
	}
	if code := l.post(t, sessions[1].Session, "/api/v1/workers/b/drain", `{}`, nil); code != 202 {
		t.Fatalf("drain b: %d", code)
	}
	if code, _ := reg(secrets[api.RoleWorker], "e"); code != 201 {
		t.Fatalf("after a drain: %d, want 201", code)
	}
}

// TestIdleSessionEnds: a session that holds nothing and makes no request
// for IdleTimeout ends and its incarnation is recorded stopped; one whose
// worker keeps polling (each poll's wait is cut to half the timeout)
// stays; the ended one's name no longer counts against the bound.
func TestIdleSessionEnds(t *testing.T) {
	var offset atomic.Int64
	l := startLiveRemote(t, remote.Config{MaxNames: 2, IdleTimeout: 400 * time.Millisecond}, &offset)
	silent := l.register(t, "silent", `"x"`)
	busy := l.register(t, "busy", `"x"`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		start := time.Now()
		if _, code := l.poll(t, busy, `{"wait_seconds":30}`); code != 200 {
			t.Fatalf("the polling worker's session: %d", code)
		}
		if d := time.Since(start); d > 300*time.Millisecond {
			t.Fatalf("a poll waited %s, more than half the idle timeout", d)
		}
		list, _ := l.workerPage(t, "")
		if got := strings.Join(ids(list.Workers), " "); got == "busy:active silent:stopped" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("workers %s, want the silent one stopped", got)
		}
	}
	if _, code := l.poll(t, silent, `{"wait_seconds":0}`); code != 401 {
		t.Errorf("the ended session: %d, want 401", code)
	}
	l.register(t, "third", `"x"`) // silent's place is free again
}

// TestWorkersPaged: GET /api/v1/workers pages by id (limit, after, next);
// a worker that ended more than an hour ago (by log time) is left out
// unless all=true; bad parameters are 400 problems.
func TestWorkersPaged(t *testing.T) {
	var offset atomic.Int64
	offset.Store(int64(2 * time.Hour))
	l := startLiveRemote(t, remote.Config{}, &offset)
	old := l.register(t, "old", `"x"`)
	if code := l.post(t, old.Session, "/api/v1/workers/old/drain", `{}`, nil); code != 202 {
		t.Fatalf("drain: %d", code)
	}
	offset.Store(0)
	for _, name := range []string{"w1", "w2", "w3", "w4", "w5"} {
		l.register(t, name, `"x"`)
	}
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for after := ""; ; {
		page, code := l.workerPage(t, "limit=2&after="+after)
		if code != 200 || len(page.Workers) > 2 {
			t.Fatalf("page after %q: %d %+v", after, code, page)
		}
		got = append(got, ids(page.Workers)...)
		if after = page.Next; after == "" {
			if strings.Join(got, " ") == "w1:active w2:active w3:active w4:active w5:active" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pages: %v", got)
			}
			got = nil // the read model is behind: read again
		}
	}
	all, code := l.workerPage(t, "all=true")
	if code != 200 || strings.Join(ids(all.Workers), " ") != "old:stopped w1:active w2:active w3:active w4:active w5:active" || all.Next != "" {
		t.Fatalf("all=true: %d %v next %q", code, ids(all.Workers), all.Next)
	}
	for _, q := range []string{"limit=0", "limit=1001", "all=maybe", "after=" + strings.Repeat("x", 101), "status=active"} {
		if _, code := l.workerPage(t, q); code != 400 {
			t.Errorf("?%s: %d, want 400", q, code)
		}
	}
}
