package api_test

import (
	"bytes"
	"context"
	"encoding/json"
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

// scopedSecret is dana's: an admin scoped to billing., so every route's
// role check lets her through and only the scope stops her.
const scopedSecret = "dana-secret-0123456789"

// leakMarker is in the input of every out-of-scope execution: no answer
// to dana may hold it.
const leakMarker = "out-of-scope-input-7f3a"

// scopeWorld is a live server (an executor, no worker) behind real HTTP:
// actions billing.pay (in dana's scope) and ops.secret (out of it), both
// paused, each with a waiting execution and a schedule.
type scopeWorld struct {
	t                  *testing.T
	srv                *api.Server
	url                string
	store              *memstore.Store
	idIn, idOut, idCli string // executions: of billing.pay, of ops.secret, of billing.pay requested by the client token
}

func newScopeWorld(t *testing.T) *scopeWorld {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := memstore.New(memstore.Options{})
	n, err := node.Start(ctx, store, node.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	views := projections.NewViews()
	done := make(chan error, 1)
	go func() { done <- views.Run(ctx, store) }()
	rs, err := remote.New(remote.Config{Store: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	specs := []string{"admin:dana:" + scopedSecret + ":scope=billing."}
	for role, secret := range secrets {
		specs = append(specs, string(role)+":"+secret)
	}
	toks, err := api.ParseTokens(specs)
	if err != nil {
		t.Fatal(err)
	}
	srv := api.New(api.Config{Commands: n.Commands, Queries: projections.NewQueries(views, store), Remote: rs, Logger: quiet, Tokens: toks})
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
	w := &scopeWorld{t: t, srv: srv, url: hs.URL, store: store}
	admin := secrets[api.RoleAdmin]
	for _, ref := range []string{"billing.pay", "ops.secret"} {
		w.must(admin, "POST", "/api/v1/actions", `{"ref":"`+ref+`","runner":"core.echo"}`, http.StatusCreated)
		w.must(admin, "POST", "/api/v1/actions/"+ref+"/pause", "", http.StatusOK)
	}
	w.idIn = w.request(admin, "billing.pay", "in")
	w.idOut = w.request(admin, "ops.secret", leakMarker)
	w.idCli = w.request(secrets[api.RoleClient], "billing.pay", "client's")
	w.must(admin, "POST", "/api/v1/schedules", `{"ref":"sched.in","action":"billing.pay","cron":"0 2 * * *","input":{}}`, http.StatusCreated)
	w.must(admin, "POST", "/api/v1/schedules", `{"ref":"sched.out","action":"ops.secret","cron":"0 2 * * *","input":{"note":"`+leakMarker+`"}}`, http.StatusCreated)
	w.must(admin, "POST", "/api/v1/schedules", `{"ref":"sched.gone","action":"ops.secret","cron":"0 2 * * *","input":{}}`, http.StatusCreated)
	w.must(admin, "DELETE", "/api/v1/schedules/sched.gone", "", http.StatusNoContent)
	// Wait for the executor to queue them: the waiters then hold their ids.
	var body []byte
	waitfor.That(t, "ops.secret's execution to be queued", func() bool {
		_, body = w.send(admin, "GET", "/api/v1/actions/ops.secret/waiters", "")
		return bytes.Contains(body, []byte(w.idOut))
	}, waitfor.Note(func() string { return "waiters: " + string(body) }))
	return w
}

func (w *scopeWorld) request(secret, action, note string) string {
	w.t.Helper()
	var acc wire.Accepted
	body := w.must(secret, "POST", "/api/v1/executions", `{"action":"`+action+`","input":{"note":"`+note+`"}}`, http.StatusAccepted)
	if err := json.Unmarshal(body, &acc); err != nil {
		w.t.Fatal(err)
	}
	return acc.ID
}

func (w *scopeWorld) must(secret, method, path, body string, want int) []byte {
	w.t.Helper()
	status, data := w.send(secret, method, path, body)
	if status != want {
		w.t.Fatalf("%s %s = %d %s, want %d", method, path, status, data, want)
	}
	return data
}

// send makes one request over HTTP; a feed is read for 300 ms, then cut.
func (w *scopeWorld) send(secret, method, path, body string) (int, []byte) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, w.url+path, strings.NewReader(body))
	if err != nil {
		w.t.Fatal(err)
	}
	jsonBody(req, body)
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		time.AfterFunc(300*time.Millisecond, cancel)
	}
	data, _ := io.ReadAll(resp.Body) // a cut feed: what arrived
	return resp.StatusCode, data
}

func (w *scopeWorld) head() uint64 {
	w.t.Helper()
	h, err := w.store.Head(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	return h
}

// target is what a route's path variables and body name: in dana's scope,
// out of it, or nothing that exists (out of it too).
type target int

const (
	inScope target = iota
	outOfScope
	missing
)

// path fills rt's template for the target.
func (w *scopeWorld) path(rt api.Route, tg target) string {
	ref, sched, id := []string{"billing.pay", "ops.secret", "ops.nosuch"}[tg], []string{"sched.in", "sched.out", "sched.nosuch"}[tg], []string{w.idIn, w.idOut, "nosuch-execution"}[tg]
	return strings.NewReplacer("{ref}", ref, "{id}", id, "{stream}", "execution-"+id, "{name}", "w-walk").Replace(scheduleRef(rt, sched))
}

// scheduleRef puts sched in a schedule route's {ref}.
func scheduleRef(rt api.Route, sched string) string {
	if strings.HasPrefix(rt.Path, "/api/v1/schedules/") {
		return strings.Replace(rt.Path, "{ref}", sched, 1)
	}
	return rt.Path
}

// body is a body rt accepts, naming the target's action ("" for none).
func (w *scopeWorld) body(rt api.Route, tg target) string {
	action := []string{"billing.pay", "ops.secret", "ops.nosuch"}[tg]
	prefix := []string{"billing.", "ops.", "ops."}[tg]
	switch rt.Name {
	case "createAction":
		return `{"ref":"` + prefix + `new","runner":"core.noop"}`
	case "changePolicy":
		return `{"runner":"core.echo","max_concurrent":1}`
	case "requestExecution":
		return `{"action":"` + action + `","input":{}}`
	case "createSchedule":
		return `{"ref":"` + prefix + `sched2","action":"` + action + `","cron":"0 3 * * *","input":{}}`
	case "registerWorker":
		return `{"name":"w-walk","runners":["core.sleep"],"slots":1}`
	case "pollWorker":
		return `{"max":0,"wait_seconds":0}`
	case "reportWorker":
		return `{"execution":"nope","status":"running"}`
	}
	return ""
}

// outNames are what only an out-of-scope answer would name.
func (w *scopeWorld) outNames() []string {
	return []string{leakMarker, w.idOut, "ops.secret", "sched.out"}
}

// TestEveryRouteAppliesRolesAndScope walks every operation of the OpenAPI
// document with a token of every role, none, and a scoped admin (dana,
// scope billing.), over real HTTP against a live server. Each route
// declares how scope applies to it (api.Route.Scope); a route that declares
// none, or a kind this test has no check for, fails. Out of scope: the
// answer is the refusal the kind promises, it equals the answer for
// something that does not exist, nothing is written, and no answer to dana
// names an out-of-scope execution, action, schedule or input; in scope,
// dana is served.
func TestEveryRouteAppliesRolesAndScope(t *testing.T) {
	w := newScopeWorld(t)
	doc := loadOpenAPIFrom(t, w.url)
	routes := map[string]api.Route{}
	for _, rt := range w.srv.Routes() {
		routes[strings.ToLower(rt.Method)+" "+openAPIPath(rt.Path)] = rt
	}
	var walk []api.Route
	for path, ops := range doc.Paths {
		for method := range ops {
			rt, ok := routes[method+" "+path]
			if !ok {
				t.Errorf("documented %s %s is no route", method, path)
				continue
			}
			walk = append(walk, rt)
		}
	}
	// Reads before writes, and a schedule's deletion last: the in-scope
	// checks write, and later ones must still find what they name.
	slices.SortStableFunc(walk, func(a, b api.Route) int {
		rank := func(rt api.Route) int {
			switch rt.Method {
			case http.MethodGet:
				return 0
			case http.MethodDelete:
				return 2
			}
			return 1
		}
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a.Name, b.Name)
	})

	// leaks checks that an answer names nothing out of scope that the
	// request did not name itself.
	leaks := func(t *testing.T, what string, body []byte) {
		t.Helper()
		for _, name := range w.outNames() {
			if bytes.Contains(body, []byte(name)) && !strings.Contains(what, name) {
				t.Errorf("%s: the answer to the scoped token names %q: %s", what, name, clipped(body))
			}
		}
	}

	// 1. Out of scope, with dana: nothing is served or written.
	for _, rt := range walk {
		t.Run("scope/"+rt.Name, func(t *testing.T) {
			if !rt.Scope.Declared() {
				t.Fatalf("%s %s declares no scope rule (api.Route.Scope)", rt.Method, rt.Path)
			}
			before := w.head()
			path, body := w.path(rt, outOfScope), w.body(rt, outOfScope)
			status, got := w.send(scopedSecret, rt.Method, path, body)
			if rt.Scope.Kind != api.ScopeFiltered && rt.Scope.Kind != api.ScopeNone && rt.Scope.Kind != api.ScopeFeed {
				if after := w.head(); after != before {
					t.Errorf("%s %s: status %d, and the log grew from %d to %d", rt.Method, path, status, before, after)
				}
			}
			switch rt.Scope.Kind {
			case api.ScopeByRef, api.ScopeByExecution, api.ScopeByStream, api.ScopeBySchedule:
				want := http.StatusNotFound
				if rt.Scope.Kind == api.ScopeByRef && rt.Method != http.MethodGet {
					want = http.StatusForbidden
				}
				if status != want {
					t.Errorf("%s %s: %d %s, want %d", rt.Method, path, status, clipped(got), want)
				}
				// As if it did not exist: the same answer as for a name
				// that names nothing.
				mpath := w.path(rt, missing)
				mstatus, mgot := w.send(scopedSecret, rt.Method, mpath, w.body(rt, missing))
				if same := strings.NewReplacer(w.idOut, "X", "ops.secret", "X", "sched.out", "X").Replace(string(got)) ==
					strings.NewReplacer("nosuch-execution", "X", "ops.nosuch", "X", "sched.nosuch", "X").Replace(string(mgot)); mstatus != status || !same {
					t.Errorf("out of scope %s %s answers %d %s; a missing one %d %s", rt.Method, path, status, clipped(got), mstatus, clipped(mgot))
				}
			case api.ScopeByBody:
				if status != http.StatusForbidden {
					t.Errorf("%s %s %s: %d %s, want 403", rt.Method, path, body, status, clipped(got))
				}
			case api.ScopeFiltered:
				if status != http.StatusOK {
					t.Errorf("%s %s: %d %s", rt.Method, path, status, clipped(got))
				}
				in := map[string]string{"listActions": "billing.pay", "allQueueStats": "billing.pay", "listExecutions": w.idIn, "listSchedules": "sched.in"}[rt.Name]
				if in == "" || !bytes.Contains(got, []byte(in)) {
					t.Errorf("%s: the list leaves out %q, in scope: %s", rt.Name, in, clipped(got))
				}
			case api.ScopeFeed:
				for _, q := range []string{"", "?action=ops.secret"} {
					if status, got := w.send(scopedSecret, rt.Method, path+q, ""); status != http.StatusForbidden {
						t.Errorf("%s%s: %d %s, want 403", path, q, status, clipped(got))
					}
				}
				status, got = w.send(scopedSecret, rt.Method, path+"?action=billing.pay&from=0", "")
				if status != http.StatusOK || !bytes.Contains(got, []byte("billing.pay")) {
					t.Errorf("%s?action=billing.pay&from=0: %d %s", path, status, clipped(got))
				}
			case api.ScopeAllActions:
				if status != http.StatusForbidden {
					t.Errorf("%s %s: %d %s, want 403 for a scoped token", rt.Method, path, status, clipped(got))
				}
			case api.ScopeNone:
				if status == http.StatusForbidden || status == http.StatusNotFound {
					t.Errorf("%s %s (%s): %d %s", rt.Method, path, rt.Scope.Why, status, clipped(got))
				}
			default:
				t.Fatalf("%s: no check for scope kind %v: add one to this test", rt.Name, rt.Scope.Kind)
			}
			leaks(t, rt.Method+" "+path+" "+body, got)
		})
	}

	// A deleted schedule of an action out of scope is 404 for dana, as one
	// that never was.
	t.Run("scope/deleted-schedule", func(t *testing.T) {
		for _, ref := range []string{"sched.gone", "sched.nosuch"} {
			if status, got := w.send(scopedSecret, "DELETE", "/api/v1/schedules/"+ref, ""); status != http.StatusNotFound {
				t.Errorf("DELETE %s: %d %s, want 404", ref, status, clipped(got))
			}
		}
	})

	// 2. In scope, with dana: served (writes after reads, as sorted).
	for _, rt := range walk {
		switch rt.Scope.Kind {
		case api.ScopeByRef, api.ScopeByExecution, api.ScopeByStream, api.ScopeBySchedule, api.ScopeByBody:
		default:
			continue
		}
		t.Run("in-scope/"+rt.Name, func(t *testing.T) {
			path := w.path(rt, inScope)
			status, got := w.send(scopedSecret, rt.Method, path, w.body(rt, inScope))
			if status/100 != 2 {
				t.Errorf("%s %s in scope: %d %s", rt.Method, path, status, clipped(got))
			}
			leaks(t, rt.Method+" "+path, got)
		})
	}

	// 3. Roles: no token is 401 (a public route serves it), a role the
	// route does not list is 403, one it lists is neither; a worker
	// session's route takes no token at all.
	idCli := w.idCli
	for _, rt := range walk {
		t.Run("roles/"+rt.Name, func(t *testing.T) {
			path := strings.Replace(w.path(rt, inScope), w.idIn, idCli, 1) // a client cancels only its own
			body := w.body(rt, inScope)
			status, got := w.send("", rt.Method, path, body)
			switch {
			case rt.Roles == nil && (status == 401 || status == 403):
				t.Errorf("public: no token got %d %s", status, clipped(got))
			case rt.Roles != nil && status != http.StatusUnauthorized:
				t.Errorf("no token: %d %s, want 401", status, clipped(got))
			}
			if rt.Roles == nil {
				return
			}
			for _, role := range []api.Role{api.RoleAdmin, api.RoleClient, api.RoleReader, api.RoleWorker} {
				status, got := w.send(secrets[role], rt.Method, path, body)
				switch {
				case rt.IsSessionRoute():
					if status != http.StatusUnauthorized {
						t.Errorf("a session's route with the %s token: %d, want 401", role, status)
					}
				case slices.Contains(rt.Roles, role) && (status == 401 || status == 403):
					t.Errorf("role %s is listed but got %d %s", role, status, clipped(got))
				case !slices.Contains(rt.Roles, role) && status != http.StatusForbidden:
					t.Errorf("role %s is not listed but got %d %s, want 403", role, status, clipped(got))
				}
			}
		})
	}
}

// loadOpenAPIFrom reads the OpenAPI document over HTTP.
func loadOpenAPIFrom(t *testing.T, base string) *openAPI {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc openAPI
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return &doc
}

func clipped(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
