package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
)

// Secrets of the named tokens the principal tests configure.
const (
	rootSecret  = "root-secret-0123456789"
	aliceSecret = "alice-secret-0123456789"
	bobSecret   = "bob-secret-0123456789"
	carolSecret = "carol-secret-0123456789" // scoped to billing.
	readSecret  = "reader-secret-0123456789"
	workSecret  = "worker-secret-0123456789"
)

// principalAPI is a real HTTP server with named tokens: root (admin),
// alice and bob (clients), carol (a client scoped to billing.), an
// old-form reader and a worker.
type principalAPI struct {
	t     *testing.T
	a     *testAPI
	url   string
	demo  string // the execution startAPI requested (anonymously)
	close func()
}

func newPrincipalAPI(t *testing.T, cfg api.Config) *principalAPI {
	t.Helper()
	toks, err := api.ParseTokens([]string{
		"admin:root:" + rootSecret, "client:alice:" + aliceSecret, "client:bob:" + bobSecret,
		"client:carol:" + carolSecret + ":scope=billing.", "reader:" + readSecret, "worker:w:" + workSecret,
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tokens = toks
	a, demo := startAPI(t, cfg)
	hs := httptest.NewServer(a.srv.Handler())
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	return &principalAPI{t: t, a: a, url: hs.URL, demo: demo}
}

// do sends a request with the bearer token secret ("" for none) and the
// header pairs, and returns the status, headers and body.
func (p *principalAPI) do(secret, method, path, body string, header ...string) (int, http.Header, []byte) {
	p.t.Helper()
	req, err := http.NewRequest(method, p.url+path, strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	jsonBody(req, body)
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

func (p *principalAPI) must(secret, method, path, body string, want int, out any, header ...string) http.Header {
	p.t.Helper()
	status, h, data := p.do(secret, method, path, body, header...)
	if status != want {
		p.t.Fatalf("%s %s = %d %s, want %d", method, path, status, data, want)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			p.t.Fatalf("%s %s: %v in %s", method, path, err, data)
		}
	}
	return h
}

func (p *principalAPI) request(secret, action string, header ...string) string {
	p.t.Helper()
	var acc wire.Accepted
	p.must(secret, "POST", "/api/v1/executions", `{"action":"`+action+`","input":{"seconds":1}}`, http.StatusAccepted, &acc, header...)
	return acc.ID
}

// principalsOf reads a stream through the API and returns each event's
// recorded principal ("" for none).
func (p *principalAPI) principalsOf(stream string) []string {
	p.t.Helper()
	var page wire.EventPage
	p.must(rootSecret, "GET", "/api/v1/streams/"+stream, "", http.StatusOK, &page)
	var out []string
	for _, e := range page.Events {
		env := domain.Envelope{Metadata: e.Metadata}
		who, _, err := domain.PrincipalOf(&env)
		if err != nil {
			p.t.Fatalf("%s v%d: %v", stream, e.Version, err)
		}
		out = append(out, who.Name)
	}
	return out
}

func TestEveryAPIEventRecordsItsPrincipal(t *testing.T) {
	p := newPrincipalAPI(t, api.Config{})
	p.must(rootSecret, "POST", "/api/v1/actions", `{"ref":"billing.charge","runner":"core.sleep"}`, http.StatusCreated, nil)
	p.must(rootSecret, "POST", "/api/v1/actions/billing.charge/pause", "", http.StatusOK, nil)
	id := p.request(aliceSecret, "billing.charge")
	p.must(aliceSecret, "POST", "/api/v1/executions/"+id+"/cancel", `{"reason":"changed my mind"}`, http.StatusAccepted, nil)

	if got := p.principalsOf("action-billing.charge"); strings.Join(got, ",") != "root,root" {
		t.Errorf("action stream principals %q, want root twice", got)
	}
	if got := p.principalsOf("queue-billing.charge"); len(got) != 2 || got[0] != "root" || got[1] != "root" {
		t.Errorf("queue stream principals %q, want root twice (the fences)", got)
	}
	if got := p.principalsOf("execution-" + id); strings.Join(got, ",") != "alice,alice" {
		t.Errorf("execution stream principals %q, want alice (request) and alice (cancel)", got)
	}
	// the old form's name is derived from the secret's hash
	if got := p.principalsOf("execution-" + p.demo); strings.Join(got, ",") != oldFormName(api.RoleClient, secrets[api.RoleClient]) {
		t.Errorf("the demo execution's principal %q", got)
	}

	rep, err := projections.Audit(context.Background(), p.a.store, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("audit: %+v", rep.Violations)
	}
	if rep.Principals["root"] != 4 || rep.Principals["alice"] != 2 {
		t.Errorf("audit counts %v, want root 4 (2 action events, 2 fences) and alice 2", rep.Principals)
	}
}

func TestClientCancelsOnlyItsOwnExecutions(t *testing.T) {
	p := newPrincipalAPI(t, api.Config{})
	alices := p.request(aliceSecret, "demo")
	bobs := p.request(bobSecret, "demo")

	status, _, body := p.do(bobSecret, "POST", "/api/v1/executions/"+alices+"/cancel", "")
	if status != http.StatusForbidden || !strings.Contains(string(body), "not requested by bob") {
		t.Errorf("bob cancelling alice's execution: %d %s, want 403", status, body)
	}
	if got := p.principalsOf("execution-" + alices); len(got) != 1 {
		t.Errorf("a refused cancel wrote: %q", got)
	}
	p.must(aliceSecret, "POST", "/api/v1/executions/"+alices+"/cancel", "", http.StatusAccepted, nil)
	p.must(rootSecret, "POST", "/api/v1/executions/"+bobs+"/cancel", "", http.StatusAccepted, nil) // admin: anything
	if got := p.principalsOf("execution-" + bobs); strings.Join(got, ",") != "bob,root" {
		t.Errorf("bob's execution: principals %q, want bob then root", got)
	}
	// an execution requested anonymously (before tokens) is no client's
	anon, _, err := p.a.cmds.Request(context.Background(), commandRequest("demo"))
	if err != nil {
		t.Fatal(err)
	}
	if status, _, body := p.do(aliceSecret, "POST", "/api/v1/executions/"+anon+"/cancel", ""); status != http.StatusForbidden {
		t.Errorf("alice cancelling an anonymous request: %d %s, want 403", status, body)
	}
}

func TestIdempotencyKeysArePerPrincipal(t *testing.T) {
	p := newPrincipalAPI(t, api.Config{})
	a1 := p.request(aliceSecret, "demo", "Idempotency-Key", "order-17")
	h := p.must(aliceSecret, "POST", "/api/v1/executions", `{"action":"demo","input":{"seconds":1}}`, http.StatusAccepted, nil, "Idempotency-Key", "order-17")
	if h.Get("Idempotent-Replayed") != "true" || !strings.HasSuffix(h.Get("Location"), a1) {
		t.Errorf("alice's retry: Location %q Idempotent-Replayed %q, want her execution replayed", h.Get("Location"), h.Get("Idempotent-Replayed"))
	}
	var b wire.Accepted
	h = p.must(bobSecret, "POST", "/api/v1/executions", `{"action":"demo","input":{"seconds":1}}`, http.StatusAccepted, &b, "Idempotency-Key", "order-17")
	if b.ID == a1 || h.Get("Idempotent-Replayed") != "" {
		t.Fatalf("bob sending alice's key and body got %s (replayed %q); alice's is %s", b.ID, h.Get("Idempotent-Replayed"), a1)
	}
	if got := p.principalsOf("execution-" + b.ID); strings.Join(got, ",") != "bob" {
		t.Errorf("bob's execution records %q", got)
	}
	// bob's key with another body conflicts with bob's own request only
	if status, _, body := p.do(bobSecret, "POST", "/api/v1/executions", `{"action":"demo","input":{"seconds":2}}`, "Idempotency-Key", "order-17"); status != http.StatusConflict {
		t.Errorf("bob reusing his key with another body: %d %s, want 409", status, body)
	}
}

func TestScopedToken(t *testing.T) {
	p := newPrincipalAPI(t, api.Config{})
	p.must(rootSecret, "POST", "/api/v1/actions", `{"ref":"billing.charge","runner":"core.sleep"}`, http.StatusCreated, nil)
	mine := p.request(carolSecret, "billing.charge")
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/api/v1/executions", `{"action":"demo","input":{}}`, 403},
		{"GET", "/api/v1/actions/demo", "", 404},
		{"GET", "/api/v1/actions/billing.charge", "", 200},
		{"GET", "/api/v1/actions/demo/queue-stats", "", 404},
		{"GET", "/api/v1/actions/demo/queue", "", 404},
		{"GET", "/api/v1/executions/" + p.demo, "", 404},
		{"GET", "/api/v1/executions/" + p.demo + "/events", "", 404},
		{"POST", "/api/v1/executions/" + p.demo + "/cancel", "", 404},
		{"GET", "/api/v1/executions/" + mine, "", 200},
		{"GET", "/api/v1/streams/action-demo", "", 404},
		{"GET", "/api/v1/streams/queue-demo", "", 404},
		{"GET", "/api/v1/streams/execution-" + p.demo, "", 404},
		{"GET", "/api/v1/streams/action-billing.charge", "", 200},
		{"GET", "/api/v1/streams/execution-" + mine, "", 200},
		{"GET", "/api/v1/events", "", 403},
		{"GET", "/api/v1/feeds/events", "", 403},
		{"GET", "/api/v1/feeds/executions?action=demo", "", 403},
		{"POST", "/api/v1/executions/" + mine + "/cancel", "", 202},
	} {
		if status, _, body := p.do(carolSecret, c.method, c.path, c.body); status != c.want {
			t.Errorf("carol %s %s: %d %s, want %d", c.method, c.path, status, body, c.want)
		}
	}
	var actions wire.ActionList
	p.must(carolSecret, "GET", "/api/v1/actions", "", http.StatusOK, &actions)
	if len(actions.Actions) != 1 || actions.Actions[0].Ref != "billing.charge" {
		t.Errorf("carol sees actions %+v, want billing.charge alone", actions.Actions)
	}
	var stats wire.QueueStatsList
	p.must(carolSecret, "GET", "/api/v1/queue-stats", "", http.StatusOK, &stats)
	if len(stats.QueueStats) != 1 || stats.QueueStats[0].Action != "billing.charge" {
		t.Errorf("carol sees queue stats %+v, want billing.charge alone", stats.QueueStats)
	}
	var list wire.ExecutionList
	p.must(carolSecret, "GET", "/api/v1/executions", "", http.StatusOK, &list)
	if len(list.Executions) != 1 || list.Executions[0].ID != mine {
		t.Errorf("carol lists %+v, want her execution alone", list.Executions)
	}
	// an admin token scoped the same way defines only in its scope
	toks, err := api.ParseTokens([]string{"admin:ops:" + rootSecret + ":scope=billing."})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := startAPI(t, api.Config{Tokens: toks})
	hs := httptest.NewServer(a.srv.Handler())
	defer hs.Close()
	q := &principalAPI{t: t, url: hs.URL}
	q.must(rootSecret, "POST", "/api/v1/actions", `{"ref":"billing.refund","runner":"core.noop"}`, http.StatusCreated, nil)
	q.must(rootSecret, "POST", "/api/v1/actions", `{"ref":"other","runner":"core.noop"}`, http.StatusForbidden, nil)
	q.must(rootSecret, "POST", "/api/v1/actions/demo/pause", "", http.StatusForbidden, nil)
	q.must(rootSecret, "PUT", "/api/v1/actions/demo/policy", `{"runner":"core.noop"}`, http.StatusForbidden, nil)
}

func commandRequest(action string) command.Request {
	return command.Request{Action: action, Input: json.RawMessage(`{"seconds":1}`)}
}

// newPlainHTTP serves a over a real HTTP listener.
func newPlainHTTP(t *testing.T, a *testAPI) *principalAPI {
	t.Helper()
	hs := httptest.NewServer(a.srv.Handler())
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	return &principalAPI{t: t, a: a, url: hs.URL}
}
