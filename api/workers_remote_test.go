package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/internal/waitfor"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/node"
	"github.com/turnstile/turnstile/services/remote"
)

// liveAPI is a server with an executor (and no in-process worker) behind
// real HTTP, with a token per role.
type liveAPI struct {
	url   string
	store *memstore.Store
}

func startLive(t *testing.T, lease time.Duration, inProcess int) *liveAPI {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := memstore.New(memstore.Options{})
	n, err := node.Start(ctx, store, node.Config{WorkerLease: lease, Logger: quiet, Workers: inProcess, Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	views := projections.NewViews()
	done := make(chan error, 1)
	go func() { done <- views.Run(ctx, store) }()
	rs, err := remote.New(remote.Config{Store: store, Lease: lease, Logger: quiet})
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

// post sends body with the bearer secret and decodes a 2xx answer into out.
func (l *liveAPI) post(t *testing.T, secret, path, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest("POST", l.url+path, strings.NewReader(body))
	jsonBody(req, body)
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s: %v in %s", path, err, raw)
		}
	}
	if resp.StatusCode >= 300 && resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("%s: %d not a problem: %s", path, resp.StatusCode, raw)
	}
	return resp.StatusCode
}

func (l *liveAPI) head(t *testing.T) uint64 {
	t.Helper()
	h, err := l.store.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (l *liveAPI) register(t *testing.T, name, runners string) wire.WorkerSession {
	t.Helper()
	var s wire.WorkerSession
	if code := l.post(t, secrets[api.RoleWorker], "/api/v1/workers/register", fmt.Sprintf(`{"name":%q,"runners":[%s],"slots":2}`, name, runners), &s); code != 201 {
		t.Fatalf("register %s: %d", name, code)
	}
	return s
}

func (l *liveAPI) poll(t *testing.T, s wire.WorkerSession, body string) (wire.WorkerPollResult, int) {
	t.Helper()
	var out wire.WorkerPollResult
	code := l.post(t, s.Session, "/api/v1/workers/"+s.Name+"/poll", body, &out)
	return out, code
}

func (l *liveAPI) report(t *testing.T, s wire.WorkerSession, name, body string) (wire.WorkerReportResult, int) {
	t.Helper()
	var out wire.WorkerReportResult
	code := l.post(t, s.Session, "/api/v1/workers/"+name+"/report", body, &out)
	return out, code
}

func (l *liveAPI) execution(t *testing.T, id string) wire.Execution {
	t.Helper()
	req, _ := http.NewRequest("GET", l.url+"/api/v1/executions/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+secrets[api.RoleReader])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var x wire.Execution
	_ = json.NewDecoder(resp.Body).Decode(&x)
	return x
}

func (l *liveAPI) waitStatus(t *testing.T, id string, want ...string) wire.Execution {
	t.Helper()
	var x wire.Execution
	waitfor.That(t, fmt.Sprintf("execution %s to be one of %v", id, want), func() bool {
		x = l.execution(t, id)
		return slices.Contains(want, string(x.Status))
	}, waitfor.Note(func() string { return "it is " + string(x.Status) }))
	return x
}

func (l *liveAPI) audit(t *testing.T) {
	t.Helper()
	rep, err := projections.Audit(context.Background(), l.store, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("audit: %v", rep.Violations)
	}
}

// TestWorkerProtocol walks the protocol over HTTP: who may register, an
// assignment only for the incarnation that serves the runner, reports that
// are idempotent, refusals (another incarnation, another name, a state
// that does not allow it, an unknown execution) that write nothing, a
// batch, and a drain that ends the session.
func TestWorkerProtocol(t *testing.T) {
	l := startLive(t, 15*time.Second, 1) // one in-process worker, local-1
	for role, want := range map[api.Role]int{api.RoleReader: 403, api.RoleClient: 403} {
		if code := l.post(t, secrets[role], "/api/v1/workers/register", `{"name":"w","runners":["x"],"slots":1}`, nil); code != want {
			t.Errorf("register as %s: %d, want %d", role, code, want)
		}
	}
	if code := l.post(t, "", "/api/v1/workers/register", `{"name":"w","runners":["x"],"slots":1}`, nil); code != 401 {
		t.Errorf("register without a token: %d", code)
	}
	for _, body := range []string{`{"name":"","runners":["x"],"slots":1}`, `{"name":"w","runners":[],"slots":1}`,
		`{"name":"w","runners":["x"],"slots":0}`, `{"name":"w","runners":["bad name"],"slots":1}`, `{"name":"w","runners":["x"],"slots":1,"extra":1}`} {
		if code := l.post(t, secrets[api.RoleWorker], "/api/v1/workers/register", body, nil); code != 400 {
			t.Errorf("register %s: %d, want 400", body, code)
		}
	}

	// A worker token does not take over an in-process worker's name.
	h0 := l.head(t)
	if code := l.post(t, secrets[api.RoleWorker], "/api/v1/workers/register", `{"name":"local-1","runners":["x"],"slots":1}`, nil); code != 409 || l.head(t) != h0 {
		t.Errorf("register over the in-process local-1: %d, %d events", code, l.head(t)-h0)
	}
	other := l.register(t, "w-other", `"other.runner"`)
	// Registering a remote name again replaces its incarnation: the old session ends.
	again := l.register(t, "w-other", `"other.runner"`)
	if _, code := l.poll(t, other, `{"wait_seconds":0}`); code != 401 {
		t.Errorf("the replaced incarnation's session: %d, want 401", code)
	}
	other = again
	w1 := l.register(t, "w1", `"billing.charge","core.echo"`)
	if code := l.post(t, secrets[api.RoleAdmin], "/api/v1/actions", `{"ref":"billing","runner":"billing.charge","max_concurrent":1}`, nil); code != 201 {
		t.Fatalf("define: %d", code)
	}
	var acc wire.Accepted
	if code := l.post(t, secrets[api.RoleClient], "/api/v1/executions", `{"action":"billing","input":{"amount":3}}`, &acc); code != 202 {
		t.Fatalf("request: %d", code)
	}
	res, code := l.poll(t, w1, `{"max":2,"wait_seconds":10}`)
	if code != 200 || len(res.Assignments) != 1 || res.Assignments[0].Execution != acc.ID || res.Assignments[0].Runner != "billing.charge" ||
		res.Assignments[0].Attempt != 1 || string(res.Assignments[0].Input) != `{"amount":3}` {
		t.Fatalf("poll: %d %+v", code, res)
	}
	if x := l.waitStatus(t, acc.ID, "scheduled"); x.Worker != "w1" { // the read model follows the log: wait for it
		t.Fatalf("handed to %q, not to the worker that serves billing.charge", x.Worker)
	}
	// Not reported on yet: a later poll returns it again.
	if res, _ := l.poll(t, w1, `{"wait_seconds":0}`); len(res.Assignments) != 1 {
		t.Errorf("a second poll: %+v", res)
	}
	// Another worker's session, under its own name, for w1's execution: 409, nothing written.
	h := l.head(t)
	if _, code := l.report(t, other, "w-other", `{"execution":"`+acc.ID+`","status":"running"}`); code != 409 {
		t.Errorf("another incarnation's report: %d, want 409", code)
	}
	// A session under another worker's name: 403.
	if _, code := l.report(t, other, "w1", `{"execution":"`+acc.ID+`","status":"running"}`); code != 403 {
		t.Errorf("a session under another name: %d, want 403", code)
	}
	for body, want := range map[string]int{
		`{"execution":"no-such-execution","status":"running"}`:            409,
		`{"execution":"` + acc.ID + `","status":"completed","attempt":2}`: 409,
		`{"execution":"` + acc.ID + `","status":"done"}`:                  400,
		`{"execution":"` + acc.ID + `"}`:                                  400,
		`{"execution":"` + acc.ID + `","status":"running","x":1}`:         400,
	} {
		if _, code := l.report(t, w1, "w1", body); code != want {
			t.Errorf("report %s: %d, want %d", body, code, want)
		}
	}
	if got := l.head(t); got != h {
		t.Fatalf("refused reports wrote %d events", got-h)
	}

	// running, then the same again (a retry: same answer, nothing written).
	out, code := l.report(t, w1, "w1", `{"execution":"`+acc.ID+`","status":"running","attempt":1}`)
	if code != 200 || out.Status != "running" {
		t.Fatalf("running: %d %+v", code, out)
	}
	h = l.head(t)
	if out, code := l.report(t, w1, "w1", `{"execution":"`+acc.ID+`","status":"running","attempt":1}`); code != 200 || out.Status != "running" || l.head(t) != h {
		t.Errorf("running again: %d %+v, %d events", code, out, l.head(t)-h)
	}
	if res, _ := l.poll(t, w1, `{"wait_seconds":0}`); len(res.Assignments) != 0 {
		t.Errorf("a poll after the report still returns it: %+v", res)
	}
	out, code = l.report(t, w1, "w1", `{"execution":"`+acc.ID+`","status":"completed","result":{"charged":3}}`)
	if code != 200 || out.Status != "completed" {
		t.Fatalf("completed: %d %+v", code, out)
	}
	h = l.head(t)
	if out, code := l.report(t, w1, "w1", `{"execution":"`+acc.ID+`","status":"completed","result":{"charged":3}}`); code != 200 || out.Status != "completed" || l.head(t) != h {
		t.Errorf("completed again: %d %+v, %d events", code, out, l.head(t)-h)
	}
	if _, code := l.report(t, w1, "w1", `{"execution":"`+acc.ID+`","status":"failed","error":"late"}`); code != 409 || l.head(t) != h {
		t.Errorf("failed after completed: %d, %d events", code, l.head(t)-h)
	}
	if x := l.waitStatus(t, acc.ID, "completed", "failed"); x.Status != "completed" || string(x.Result) != `{"charged":3}` {
		t.Errorf("the execution: %+v", x)
	}

	// A batch: one accepted (a terminal report on a scheduled execution
	// records its start first), one refused; in order.
	if code := l.post(t, secrets[api.RoleClient], "/api/v1/executions", `{"action":"billing","input":{"amount":4}}`, &acc); code != 202 {
		t.Fatalf("request: %d", code)
	}
	if res, _ := l.poll(t, w1, `{"wait_seconds":10}`); len(res.Assignments) != 1 {
		t.Fatalf("poll: %+v", res)
	}
	var batch wire.WorkerReportResults
	if code := l.post(t, w1.Session, "/api/v1/workers/w1/report", `{"reports":[{"execution":"`+acc.ID+`","status":"failed","error":"card declined"},{"execution":"nope","status":"running"}]}`, &batch); code != 200 ||
		len(batch.Results) != 2 || batch.Results[0].Status != "failed" || batch.Results[0].Problem != nil || batch.Results[1].Problem == nil || batch.Results[1].Problem.Status != 409 {
		t.Fatalf("batch: %d %+v", code, batch)
	}
	if x := l.waitStatus(t, acc.ID, "failed", "completed"); x.Status != "failed" || x.Error != "card declined" {
		t.Errorf("the batch's execution: %+v", x)
	}

	// Reports on one execution in one batch are decided in the batch's order
	// (the batch's executions are decided at once, each one's reports in turn).
	if code := l.post(t, secrets[api.RoleClient], "/api/v1/executions", `{"action":"billing","input":{"amount":5}}`, &acc); code != 202 {
		t.Fatalf("request: %d", code)
	}
	if res, _ := l.poll(t, w1, `{"wait_seconds":10}`); len(res.Assignments) != 1 {
		t.Fatalf("poll: %+v", res)
	}
	batch = wire.WorkerReportResults{}
	if code := l.post(t, w1.Session, "/api/v1/workers/w1/report", `{"reports":[{"execution":"nope","status":"running"},{"execution":"`+acc.ID+`","status":"running"},{"execution":"`+acc.ID+`","status":"completed","result":{"charged":5}}]}`, &batch); code != 200 ||
		len(batch.Results) != 3 || batch.Results[0].Problem == nil || batch.Results[1].Status != "running" || batch.Results[1].Problem != nil ||
		batch.Results[2].Status != "completed" || batch.Results[2].Problem != nil {
		t.Fatalf("a batch with two reports on one execution: %d %+v", code, batch)
	}
	if x := l.waitStatus(t, acc.ID, "completed", "failed"); x.Status != "completed" || x.RunningAt == nil {
		t.Errorf("the execution after running and completed in one batch: %+v", x)
	}

	// Drain with nothing in flight: the incarnation stops, its session is refused.
	if code := l.post(t, w1.Session, "/api/v1/workers/w1/drain", ``, nil); code != 202 {
		t.Fatalf("drain: %d", code)
	}
	waitfor.That(t, "the drained session to be refused (401)", func() bool {
		_, code := l.poll(t, w1, `{"wait_seconds":0}`)
		return code == 401
	})
	l.audit(t)
}

// TestWorkerLostIncarnation: an incarnation that stops polling past its
// lease is declared lost by the executor (log time); its session is then
// refused (401) and writes nothing; the execution it held is taken back and
// handed to a live incarnation that serves its runner, which completes it.
func TestWorkerLostIncarnation(t *testing.T) {
	l := startLive(t, 300*time.Millisecond, 0)
	if code := l.post(t, secrets[api.RoleAdmin], "/api/v1/actions", `{"ref":"job","runner":"my.job","max_concurrent":1,"max_attempts":3}`, nil); code != 201 {
		t.Fatalf("define: %d", code)
	}
	var acc wire.Accepted
	l.post(t, secrets[api.RoleClient], "/api/v1/executions", `{"action":"job"}`, &acc)
	time.Sleep(100 * time.Millisecond)
	if x := l.execution(t, acc.ID); x.Status != "requested" {
		t.Fatalf("with nobody serving my.job the execution is %s, want it waiting", x.Status)
	}
	l.waitServed(t, "job", "my.job", false)
	a := l.register(t, "wa", `"my.job"`)
	l.waitServed(t, "job", "my.job", true)
	res, _ := l.poll(t, a, `{"wait_seconds":10}`)
	if len(res.Assignments) != 1 {
		t.Fatalf("poll: %+v", res)
	}
	if _, code := l.report(t, a, "wa", `{"execution":"`+acc.ID+`","status":"running"}`); code != 200 {
		t.Fatalf("running: %d", code)
	}
	// wa freezes: no poll, no heartbeat. The executor declares it lost.
	x := l.waitStatus(t, acc.ID, "requested", "scheduled", "scheduling")
	if x.Worker == "wa" && x.Status == "running" {
		t.Fatal("still running on the lost worker")
	}
	h := l.head(t)
	if _, code := l.report(t, a, "wa", `{"execution":"`+acc.ID+`","status":"completed"}`); code != 401 {
		t.Errorf("the lost incarnation's report: %d, want 401", code)
	}
	if got := l.head(t); got != h {
		t.Errorf("the lost incarnation's report wrote %d events", got-h)
	}
	b := l.register(t, "wb", `"my.job"`)
	deadline := time.Now().Add(10 * time.Second)
	for done := false; !done; {
		res, code := l.poll(t, b, `{"wait_seconds":1}`)
		if code != 200 {
			t.Fatalf("wb poll: %d", code)
		}
		for _, as := range res.Assignments {
			if as.Execution == acc.ID && as.Attempt == 2 {
				if _, code := l.report(t, b, "wb", `{"execution":"`+acc.ID+`","status":"completed","attempt":2}`); code != 200 {
					t.Fatalf("wb completed: %d", code)
				}
				done = true
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("never handed to wb")
		}
	}
	if x := l.waitStatus(t, acc.ID, "completed"); x.Worker != "wb" {
		t.Errorf("completed by %q", x.Worker)
	}
	l.audit(t)
}

// waitServed waits until the queue stats of action ref and the workers list
// agree that runner is served (or, with served false, that nobody serves it).
func (l *liveAPI) waitServed(t *testing.T, ref, runner string, served bool) {
	t.Helper()
	var st wire.QueueStats
	var ws wire.WorkerList
	waitfor.That(t, fmt.Sprintf("runner %s served=%v in the queue stats and the worker list", runner, served), func() bool {
		st, ws = wire.QueueStats{}, wire.WorkerList{}
		get := func(path string, out any) {
			req, _ := http.NewRequest("GET", l.url+path, nil)
			req.Header.Set("Authorization", "Bearer "+secrets[api.RoleReader])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			_ = json.NewDecoder(resp.Body).Decode(out)
		}
		get("/api/v1/actions/"+ref+"/queue-stats", &st)
		get("/api/v1/workers", &ws)
		unserved := false
		for _, r := range ws.UnservedRunners {
			unserved = unserved || r == runner
		}
		return st.NoWorker == !served && unserved == !served
	}, waitfor.Note(func() string {
		return fmt.Sprintf("queue stats say no_worker=%v, workers say unserved %v", st.NoWorker, ws.UnservedRunners)
	}))
}
