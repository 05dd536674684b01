package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/remote"
	"github.com/turnstile/turnstile/services/repository"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testAPI is a real server over a memstore: the command side and a read
// model that follows the log. No executor runs: requested executions stay
// requested.
type testAPI struct {
	srv    *api.Server
	store  *memstore.Store
	cmds   *command.Service
	remote *remote.Service
}

// sessionName is the worker name of testAPI.session's session.
const sessionName = "w-test"

// session registers a worker incarnation named sessionName (serving
// core.sleep) and returns its session secret.
func (a *testAPI) session(t testing.TB) string {
	t.Helper()
	s, err := a.remote.Register(context.Background(), remote.Registration{Name: sessionName, Runners: []string{"core.sleep"}, Slots: 2}, "test")
	if err != nil {
		t.Fatal(err)
	}
	return s.Session
}

// Secrets of the tokens newTestAPI configures, one per role.
var secrets = map[api.Role]string{
	api.RoleAdmin:  "admin-secret-0123456789",
	api.RoleClient: "client-secret-0123456789",
	api.RoleReader: "reader-secret-0123456789",
	api.RoleWorker: "worker-secret-0123456789",
}

func allTokens(t testing.TB) *api.Tokens {
	t.Helper()
	var specs []string
	for role, secret := range secrets {
		specs = append(specs, string(role)+":"+secret)
	}
	toks, err := api.ParseTokens(specs)
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

// newTestAPI starts a server (tokens nil: anonymous) with action "demo"
// (core.sleep) defined and one execution of it requested; it returns the
// execution's id too. Everything stops at the end of the test.
func newTestAPI(t testing.TB, tokens *api.Tokens) (*testAPI, string) {
	return startAPI(t, api.Config{Tokens: tokens})
}

// startAPI is newTestAPI with cfg's Commands and Queries filled in (and
// Logger, if nil, with one that discards).
func startAPI(t testing.TB, cfg api.Config) (*testAPI, string) {
	t.Helper()
	store := memstore.New(memstore.Options{})
	cmds := &command.Service{Store: store, Writer: "test"}
	views := projections.NewViews()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- views.Run(ctx, store) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("views: %v", err)
		}
		_ = store.Close()
	})
	if _, err := cmds.DefineAction(ctx, domain.Policy{Ref: "demo", Runner: "core.sleep", MaxConcurrent: 2}); err != nil {
		t.Fatal(err)
	}
	// requested by the client token of secrets (a client cancels only its own)
	asClient := repository.WithPrincipal(ctx, domain.Principal{Name: oldFormName(api.RoleClient, secrets[api.RoleClient]), Role: "client"})
	id, _, err := cmds.Request(asClient, command.Request{Action: "demo", Input: []byte(`{"seconds":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Commands, cfg.Queries = cmds, projections.NewQueries(views, store)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Remote == nil {
		rs, err := remote.New(remote.Config{Store: store, Logger: cfg.Logger})
		if err != nil {
			t.Fatal(err)
		}
		if err := rs.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rs.Stop)
		cfg.Remote = rs
	}
	return &testAPI{srv: api.New(cfg), store: store, cmds: cmds, remote: cfg.Remote}, id
}

// localRequest is httptest.NewRequest as a local client sends it: to
// localhost (a server without tokens refuses other hosts), with a body
// declared JSON.
func localRequest(method, target string, body io.Reader) *http.Request {
	req := httptest.NewRequest(method, target, body)
	req.Host = "localhost"
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// jsonBody declares req's body JSON when it has one (the API refuses a
// body without Content-Type: application/json).
func jsonBody(req *http.Request, body string) {
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
}

// oldFormName is the name ParseTokens gives a ROLE:SECRET token.
func oldFormName(role api.Role, secret string) string {
	h := sha256.Sum256([]byte(secret))
	return string(role) + "-" + hex.EncodeToString(h[:4])
}

// samplePath fills a route's template with values that exist in newTestAPI's store.
func samplePath(rt api.Route, execID string) string {
	return strings.NewReplacer("{ref}", "demo", "{id}", execID, "{stream}", "action-demo", "{name}", sessionName).Replace(rt.Path)
}

// sampleBody is a body the route accepts ("" for none).
func sampleBody(rt api.Route) string {
	switch rt.Name {
	case "createAction":
		return `{"ref":"demo.other","runner":"core.noop"}`
	case "changePolicy":
		return `{"runner":"core.sleep","max_concurrent":3}`
	case "requestExecution":
		return `{"action":"demo","input":{"seconds":1}}`
	case "registerWorker":
		return `{"name":"w-walk","runners":["core.sleep"],"slots":1}`
	case "pollWorker":
		return `{"max":0,"wait_seconds":0}`
	case "reportWorker":
		return `{"execution":"nope","status":"running"}`
	}
	return ""
}

// call makes one request; feeds are cut once their header has arrived.
func call(t *testing.T, base string, rt api.Route, execID, token string) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, rt.Method, base+samplePath(rt, execID), strings.NewReader(sampleBody(rt)))
	if err != nil {
		t.Fatal(err)
	}
	jsonBody(req, sampleBody(rt))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", rt.Method, rt.Path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s %s: %d with Content-Type %q", rt.Method, rt.Path, resp.StatusCode, ct)
		}
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	return resp.StatusCode
}

// TestAuthWalk walks the whole route table: a non-public route answers 401
// without a token or with a wrong one, 403 to a role it does not accept, and
// neither to a role it accepts; a public route needs no token.
func TestAuthWalk(t *testing.T) {
	a, execID := newTestAPI(t, allTokens(t))
	hs := httptest.NewServer(a.srv.Handler())
	defer hs.Close()
	defer hs.CloseClientConnections() // feeds: do not wait for them at Close

	roles := []api.Role{api.RoleAdmin, api.RoleClient, api.RoleReader, api.RoleWorker}
	session := a.session(t)
	for _, rt := range a.srv.Routes() {
		t.Run(rt.Name, func(t *testing.T) {
			if rt.IsSessionRoute() {
				// A worker session's route: no token reaches it, only the
				// session, under its own name (TestWorkerSessions has more).
				for _, tok := range []string{"", "not-a-configured-secret-at-all", secrets[api.RoleAdmin], secrets[api.RoleWorker]} {
					if got := call(t, hs.URL, rt, execID, tok); got != http.StatusUnauthorized {
						t.Errorf("token %q: got %d, want 401", tok, got)
					}
				}
				if got := call(t, hs.URL, rt, execID, session); got == 401 || got == 403 {
					t.Errorf("its session: got %d", got)
				}
				return
			}
			if rt.Roles == nil {
				if got := call(t, hs.URL, rt, execID, ""); got == 401 || got == 403 {
					t.Errorf("public route %s %s answered %d without a token", rt.Method, rt.Path, got)
				}
				return
			}
			if got := call(t, hs.URL, rt, execID, ""); got != http.StatusUnauthorized {
				t.Errorf("no token: got %d, want 401", got)
			}
			if got := call(t, hs.URL, rt, execID, "not-a-configured-secret-at-all"); got != http.StatusUnauthorized {
				t.Errorf("wrong token: got %d, want 401", got)
			}
			for _, role := range roles {
				got := call(t, hs.URL, rt, execID, secrets[role])
				allowed := false
				for _, r := range rt.Roles {
					allowed = allowed || r == role
				}
				switch {
				case allowed && (got == 401 || got == 403):
					t.Errorf("role %s is allowed but got %d", role, got)
				case !allowed && got != http.StatusForbidden:
					t.Errorf("role %s is not allowed but got %d, want 403", role, got)
				}
			}
		})
	}
}

// TestAuthSchemes checks how the Authorization header is read.
func TestAuthSchemes(t *testing.T) {
	a, _ := newTestAPI(t, allTokens(t))
	h := a.srv.Handler()
	for _, tc := range []struct {
		header string
		want   int
	}{
		{"Bearer " + secrets[api.RoleReader], 200},
		{"bearer " + secrets[api.RoleReader], 200},
		{"Bearer  " + secrets[api.RoleReader] + " ", 200},
		{"Basic " + secrets[api.RoleReader], 401},
		{secrets[api.RoleReader], 401},
		{"Bearer ", 401},
		{"Bearer " + secrets[api.RoleReader] + "x", 401},
	} {
		req := localRequest("GET", "/api/v1/workers", nil)
		req.Header.Set("Authorization", tc.header)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("Authorization %q: got %d, want %d", tc.header, rec.Code, tc.want)
		}
	}
}

func TestAnonymousWithoutTokens(t *testing.T) {
	for _, toks := range []*api.Tokens{nil, mustTokens(t)} {
		a, _ := newTestAPI(t, toks)
		rec := httptest.NewRecorder()
		a.srv.Handler().ServeHTTP(rec, localRequest("POST", "/api/v1/admin/rebuild", nil))
		if rec.Code != http.StatusOK {
			t.Errorf("tokens %v: anonymous admin route got %d, want 200", toks, rec.Code)
		}
	}
}

// mustTokens parses no specs: a configured but empty token set.
func mustTokens(t *testing.T) *api.Tokens {
	t.Helper()
	toks, err := api.ParseTokens([]string{"", "  "})
	if err != nil {
		t.Fatal(err)
	}
	if !toks.Empty() {
		t.Fatal("blank specs made tokens")
	}
	return toks
}

func TestCheckListenAddress(t *testing.T) {
	t.Parallel()
	withTokens := allTokens(t)
	for _, tc := range []struct {
		addr       string
		anonymous  bool // allowed without tokens
		withTokens bool // allowed with tokens
	}{
		{"127.0.0.1:8080", true, true},
		{"127.0.0.2:0", true, true},
		{"[::1]:8080", true, true},
		{"localhost:8080", true, true},
		{"0.0.0.0:8080", false, true},
		{"[::]:8080", false, true},
		{"192.168.1.20:8080", false, true},
		{"10.0.0.1:80", false, true},
		{":8080", false, true},
		{"example.com:8080", false, true},
		{"127.0.0.1", false, true}, // no port: refused when it is checked
	} {
		if err := api.CheckListenAddress(tc.addr, nil); (err == nil) != tc.anonymous {
			t.Errorf("%q without tokens: err %v, want allowed=%v", tc.addr, err, tc.anonymous)
		}
		if err := api.CheckListenAddress(tc.addr, withTokens); (err == nil) != tc.withTokens {
			t.Errorf("%q with tokens: err %v, want allowed=%v", tc.addr, err, tc.withTokens)
		}
	}
}

func TestParseTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		specs   []string
		wantErr string // "" for none
	}{
		{[]string{"admin:0123456789abcdef"}, ""},
		{[]string{" reader:0123456789abcdef ", "worker:w1:0123456789abcdeg"}, ""},
		{[]string{"client:alice:0123456789abcdef:scope=billing.:scope=reports-"}, ""},
		{[]string{"worker:0123456789abcdef:with-colon"}, "is 10 bytes"}, // a named token: secrets hold no ':'
		{[]string{"client:al ice:0123456789abcdef"}, "only letters, digits"},
		{[]string{"client:alice:0123456789abcdef", "admin:alice:fedcba9876543210"}, `two tokens are named "alice"`},
		{[]string{"client:alice:0123456789abcdef", "admin:root:0123456789abcdef"}, "the same secret is configured twice"},
		{[]string{"client:alice:0123456789abcdef:scope="}, "scope= needs an action ref prefix"},
		{[]string{"client:alice:0123456789abcdef:scope=bad/"}, "no action ref prefix"},
		{[]string{"client:alice:0123456789abcdef:team=x"}, `unknown option "team="`},
		{[]string{"client:alice:0123456789abcdef:rest-of-secret"}, `unknown option after the secret`},
		{[]string{"root:0123456789abcdef"}, `unknown role "root"`},
		{[]string{"Admin:0123456789abcdef"}, `unknown role "Admin"`},
		{[]string{"admin:short"}, "is 5 bytes; use at least 16"},
		{[]string{"admin:"}, "is 0 bytes"},
		{[]string{"admin0123456789abcdef"}, "ROLE:SECRET"},
		{[]string{"admin:alice:"}, "is 0 bytes"},
		{[]string{"client:0123456789abcdef", "nocolon"}, "ROLE:SECRET"},
	} {
		toks, err := api.ParseTokens(tc.specs)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tc.specs, err)
		case tc.wantErr == "" && toks.Empty():
			t.Errorf("%q: no token configured", tc.specs)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: err %v, want one containing %q", tc.specs, err, tc.wantErr)
		}
	}
}
