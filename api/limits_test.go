package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/domain"
)

// TestHostileInputs walks every route with hostile input — an oversized
// body, overlong ids in the path, an overlong Idempotency-Key, bodies nested
// too deep — and wants a 4xx problem with nothing stored.
func TestHostileInputs(t *testing.T) {
	const limit = 4 << 10
	a, execID := startAPI(t, api.Config{MaxBodyBytes: limit})
	h := a.srv.Handler()
	ctx := context.Background()
	try := func(what string, req *http.Request, want int) {
		t.Helper()
		before, _ := a.store.Head(ctx)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		after, _ := a.store.Head(ctx)
		if rec.Code != want || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s, want a %d problem", what, rec.Code, clipBody(rec.Body.String()), want)
		}
		if after != before {
			t.Errorf("%s: %d events stored", what, after-before)
		}
	}
	long := strings.Repeat("x", 201)
	session := a.session(t)
	// A worker session's route reads nothing before the session is checked
	// (so the walk presents one), and a session under another name is 403.
	withSession := func(rt api.Route, req *http.Request) *http.Request {
		if rt.IsSessionRoute() {
			req.Header.Set("Authorization", "Bearer "+session)
		}
		return req
	}
	for _, rt := range a.srv.Routes() {
		if rt.Method == "POST" || rt.Method == "PUT" {
			body := `{"action":"demo","input":{"pad":"` + strings.Repeat("a", limit) + `"}}`
			try(rt.Name+" with an oversized body", withSession(rt, request(rt.Method, samplePath(rt, execID), "", body)), http.StatusRequestEntityTooLarge)
			deep := strings.Repeat("[", api.MaxJSONDepth+1) + strings.Repeat("]", api.MaxJSONDepth+1)
			try(rt.Name+" with a body nested too deep", withSession(rt, request(rt.Method, samplePath(rt, execID), "", deep)), http.StatusBadRequest)
		}
		if strings.ContainsAny(rt.Path, "{") {
			path := strings.NewReplacer("{ref}", long, "{id}", long, "{stream}", long, "{name}", long).Replace(rt.Path)
			want := http.StatusBadRequest
			if rt.IsSessionRoute() {
				want = http.StatusForbidden
			}
			try(rt.Name+" with an overlong id", withSession(rt, request(rt.Method, path, "", sampleBody(rt))), want)
		}
	}
	req := request("POST", "/api/v1/executions", "", `{"action":"demo"}`)
	req.Header.Set("Idempotency-Key", long)
	try("an overlong Idempotency-Key", req, http.StatusBadRequest)

	// An execution's input may nest up to the limit, and not one level more;
	// brackets inside strings do not count. (The action's runner is not a
	// built-in, whose input shape would be checked too.)
	if _, err := a.cmds.DefineAction(ctx, domain.Policy{Ref: "deep", Runner: "user.deep"}); err != nil {
		t.Fatal(err)
	}
	nest := func(levels int) string { // the body itself is one level, "input" another
		return `{"action":"deep","input":` + strings.Repeat(`{"a":`, levels-1) + `"[[[{{{"` + strings.Repeat("}", levels-1) + `}`
	}
	try("an input nested one level too deep", request("POST", "/api/v1/executions", "", nest(api.MaxJSONDepth+1)), http.StatusBadRequest)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, request("POST", "/api/v1/executions", "", nest(api.MaxJSONDepth)))
	if rec.Code != http.StatusAccepted {
		t.Errorf("an input nested exactly to the limit: %d %s", rec.Code, clipBody(rec.Body.String()))
	}
}

func clipBody(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
