package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
)

// openAPI is the part of an OpenAPI 3 document the tests read.
type openAPI struct {
	OpenAPI    string                          `json:"openapi"`
	Paths      map[string]map[string]operation `json:"paths"`
	Components struct {
		Schemas         map[string]*schema         `json:"schemas"`
		Responses       map[string]json.RawMessage `json:"responses"`
		SecuritySchemes map[string]struct {
			Type, Scheme string
		} `json:"securitySchemes"`
	} `json:"components"`
}

type operation struct {
	OperationID string          `json:"operationId"`
	Roles       *[]string       `json:"x-roles"`
	Scope       string          `json:"x-scope"`
	Security    *[]any          `json:"security"`
	Parameters  []parameter     `json:"parameters"`
	RequestBody *requestBody    `json:"requestBody"`
	Responses   map[string]resp `json:"responses"`
}

type parameter struct {
	Name     string `json:"name"`
	In       string `json:"in"`
	Required bool   `json:"required"`
}

type requestBody struct {
	Required bool                 `json:"required"`
	Content  map[string]mediaType `json:"content"`
}

type resp struct {
	Ref     string               `json:"$ref"`
	Content map[string]mediaType `json:"content"`
}

type mediaType struct {
	Schema *schema `json:"schema"`
}

type schema struct {
	Ref                  string             `json:"$ref"`
	Type                 string             `json:"type"`
	Properties           map[string]*schema `json:"properties"`
	Required             []string           `json:"required"`
	AdditionalProperties *bool              `json:"additionalProperties"`
	Enum                 []any              `json:"enum"`
	AllOf                []*schema          `json:"allOf"`
}

// loadOpenAPI fetches the document the server serves.
func loadOpenAPI(t testing.TB, h http.Handler) *openAPI {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, localRequest("GET", "/api/v1/openapi.json", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /api/v1/openapi.json: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	var doc openAPI
	dec := json.NewDecoder(rec.Body)
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("the OpenAPI document does not parse: %v", err)
	}
	return &doc
}

// resolve follows a "#/components/responses/X" reference.
func (d *openAPI) resolve(t testing.TB, r resp) resp {
	t.Helper()
	name, ok := strings.CutPrefix(r.Ref, "#/components/responses/")
	if r.Ref == "" {
		return r
	}
	raw, found := d.Components.Responses[name]
	if !ok || !found {
		t.Fatalf("unresolvable response reference %q", r.Ref)
	}
	var out resp
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// schemaOf follows a "#/components/schemas/X" reference (and a one-element allOf).
func (d *openAPI) schemaOf(t testing.TB, s *schema) *schema {
	t.Helper()
	for s != nil && (s.Ref != "" || len(s.AllOf) == 1) {
		if len(s.AllOf) == 1 {
			s = s.AllOf[0]
			continue
		}
		name, ok := strings.CutPrefix(s.Ref, "#/components/schemas/")
		next := d.Components.Schemas[name]
		if !ok || next == nil {
			t.Fatalf("unresolvable schema reference %q", s.Ref)
		}
		s = next
	}
	return s
}

var muxVar = regexp.MustCompile(`\{([^}:]+)(:[^}]*)?\}`)

// openAPIPath translates a gorilla/mux template ({name} or {name:pattern})
// into an OpenAPI path template.
func openAPIPath(muxPath string) string { return muxVar.ReplaceAllString(muxPath, "{$1}") }

func TestOpenAPIDocument(t *testing.T) {
	a, _ := newTestAPI(t, nil)
	doc := loadOpenAPI(t, a.srv.Handler())
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi is %q, want 3.x", doc.OpenAPI)
	}
	if b := doc.Components.SecuritySchemes["bearer"]; b.Type != "http" || b.Scheme != "bearer" {
		t.Errorf("the bearer security scheme is %+v", b)
	}
}

// TestOpenAPIMatchesRoutes checks both directions: every route is documented
// with its method, operationId and roles, and every documented operation is
// a route.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	a, _ := newTestAPI(t, nil)
	doc := loadOpenAPI(t, a.srv.Handler())
	routes := map[string]api.Route{}
	for _, rt := range a.srv.Routes() {
		key := strings.ToLower(rt.Method) + " " + openAPIPath(rt.Path)
		routes[key] = rt
		op, ok := doc.Paths[openAPIPath(rt.Path)][strings.ToLower(rt.Method)]
		if !ok {
			t.Errorf("route %s (%s %s) is not documented", rt.Name, rt.Method, rt.Path)
			continue
		}
		if op.OperationID != rt.Name {
			t.Errorf("%s: operationId %q, want the route's name %q", key, op.OperationID, rt.Name)
		}
		var want []string
		for _, r := range rt.Roles {
			want = append(want, string(r))
		}
		switch {
		case op.Roles == nil:
			t.Errorf("%s: no x-roles", key)
		case !slices.Equal(*op.Roles, want) && !(len(*op.Roles) == 0 && len(want) == 0):
			t.Errorf("%s: x-roles %v, want %v", key, *op.Roles, want)
		}
		if !rt.Scope.Declared() {
			t.Errorf("%s: the route declares no scope rule (api.ScopeRule)", key)
		}
		if op.Scope != rt.Scope.Kind.String() {
			t.Errorf("%s: x-scope %q, want %q", key, op.Scope, rt.Scope.Kind)
		}
		if public := rt.Roles == nil; public != (op.Security != nil && len(*op.Security) == 0) {
			t.Errorf("%s: public=%v but security is %v", key, public, op.Security)
		}
		for _, m := range muxVar.FindAllStringSubmatch(rt.Path, -1) {
			if !slices.ContainsFunc(op.Parameters, func(p parameter) bool { return p.In == "path" && p.Name == m[1] && p.Required }) {
				t.Errorf("%s: path parameter %q is not documented as required", key, m[1])
			}
		}
	}
	ids := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			key := method + " " + path
			if _, ok := routes[key]; !ok {
				t.Errorf("documented %s is not a route", key)
			}
			if ids[op.OperationID] {
				t.Errorf("operationId %q is used twice", op.OperationID)
			}
			ids[op.OperationID] = true
		}
	}
}

// TestOpenAPIResponses checks that every documented error is problem+json,
// that every non-public route documents 401 and 403, and that feeds are
// text/event-stream.
func TestOpenAPIResponses(t *testing.T) {
	a, _ := newTestAPI(t, nil)
	doc := loadOpenAPI(t, a.srv.Handler())
	for _, rt := range a.srv.Routes() {
		op := doc.Paths[openAPIPath(rt.Path)][strings.ToLower(rt.Method)]
		if rt.Roles != nil {
			for _, code := range []string{"401", "403"} {
				if _, ok := op.Responses[code]; !ok {
					t.Errorf("%s does not document %s", rt.Name, code)
				}
			}
		}
		codes := []string{"421"} // any route, on a server without tokens addressed by another name
		if rt.Method != http.MethodGet {
			codes = append(codes, "415")
		}
		for _, code := range codes {
			if _, ok := op.Responses[code]; !ok {
				t.Errorf("%s does not document %s", rt.Name, code)
			}
		}
		success := 0
		for code, r := range op.Responses {
			r = doc.resolve(t, r)
			if code != "default" && code < "300" {
				success++
				if strings.HasPrefix(rt.Name, "feed") && r.Content["text/event-stream"].Schema == nil {
					t.Errorf("%s %s: a feed must answer text/event-stream", rt.Name, code)
				}
				continue
			}
			if r.Content["application/problem+json"].Schema == nil {
				t.Errorf("%s %s: not documented as application/problem+json", rt.Name, code)
			}
		}
		if success == 0 {
			t.Errorf("%s documents no success response", rt.Name)
		}
	}
}

// jsonFields returns the JSON names of t's fields, following embedded structs.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPISchemasMatchGoTypes checks that the documented shapes have
// exactly the JSON fields the server encodes (or decodes).
func TestOpenAPISchemasMatchGoTypes(t *testing.T) {
	a, _ := newTestAPI(t, nil)
	doc := loadOpenAPI(t, a.srv.Handler())
	for name, v := range map[string]any{
		"Problem":       api.Problem{},
		"Policy":        domain.Policy{},
		"RateLimit":     domain.RateLimit{},
		"ActionView":    projections.ActionView{},
		"ExecutionView": projections.ExecutionView{},
		"QueueStats":    wire.QueueStats{}, // what the API serves (no_worker beside the fold's figures)
		"QueueContents": projections.QueueContents{},
		"Waiter":        projections.WaiterView{},
		"WorkerInfo":    projections.WorkerView{},
		"Event":         domain.Envelope{},
		"LogStatus":     wire.LogStatus{},
		"AuditVerdict":  wire.AuditVerdict{},
		"Explanation":   wire.Explanation{},
		// The worker protocol's documents.
		"WorkerRegister":     wire.WorkerRegister{},
		"WorkerSession":      wire.WorkerSession{},
		"WorkerPoll":         wire.WorkerPoll{},
		"Assignment":         wire.Assignment{},
		"WorkerPollResult":   wire.WorkerPollResult{},
		"WorkerReport":       wire.WorkerReport{},
		"WorkerReportResult": wire.WorkerReportResult{},
	} {
		s := doc.Components.Schemas[name]
		if s == nil {
			t.Errorf("schema %s is missing", name)
			continue
		}
		var got []string
		for p := range s.Properties {
			got = append(got, p)
		}
		sort.Strings(got)
		if want := jsonFields(reflect.TypeOf(v)); !slices.Equal(got, want) {
			t.Errorf("schema %s has properties %v; the Go type has %v", name, got, want)
		}
		for _, r := range s.Required {
			if s.Properties[r] == nil {
				t.Errorf("schema %s requires %q, which it does not define", name, r)
			}
		}
	}
	var statuses []any
	for _, s := range domain.AllStatuses {
		if s != domain.StatusNew {
			statuses = append(statuses, string(s))
		}
	}
	if got := doc.Components.Schemas["Status"].Enum; !reflect.DeepEqual(got, statuses) {
		t.Errorf("Status enum %v, want %v", got, statuses)
	}
}

// sampleValue is a JSON value of a property's documented type.
func sampleValue(s *schema) string {
	switch s.Type {
	case "integer", "number":
		return "1"
	case "boolean":
		return "true"
	case "object":
		return "{}"
	case "array":
		return "[]"
	}
	return `"x"`
}

// TestOpenAPIRequestBodies checks the documented request bodies against the
// server: no documented property is refused as unknown, and where the
// schema says additionalProperties: false an unknown field is refused.
func TestOpenAPIRequestBodies(t *testing.T) {
	a, execID := newTestAPI(t, nil)
	h := a.srv.Handler()
	doc := loadOpenAPI(t, h)
	session := a.session(t)
	bodies := 0
	for _, rt := range a.srv.Routes() {
		op := doc.Paths[openAPIPath(rt.Path)][strings.ToLower(rt.Method)]
		if op.RequestBody == nil {
			continue
		}
		bodies++
		s := doc.schemaOf(t, op.RequestBody.Content["application/json"].Schema)
		if s == nil || s.Type != "object" {
			t.Errorf("%s: the request body is not a JSON object schema", rt.Name)
			continue
		}
		post := func(body string) (int, api.Problem) {
			rec := httptest.NewRecorder()
			req := localRequest(rt.Method, samplePath(rt, execID), strings.NewReader(body))
			if rt.IsSessionRoute() {
				req.Header.Set("Authorization", "Bearer "+session)
				ctx, cancel := context.WithTimeout(req.Context(), 50*time.Millisecond) // a poll waits for work
				defer cancel()
				req = req.WithContext(ctx)
			}
			h.ServeHTTP(rec, req)
			var p api.Problem
			if rec.Code >= 300 {
				_ = json.Unmarshal(rec.Body.Bytes(), &p)
			}
			return rec.Code, p
		}
		for name, prop := range s.Properties {
			body := fmt.Sprintf(`{%q:%s}`, name, sampleValue(doc.schemaOf(t, prop)))
			if code, p := post(body); code == http.StatusBadRequest && strings.Contains(p.Type, "unknown-field") {
				t.Errorf("%s: documented property %q is refused: %s", rt.Name, name, p.Detail)
			}
		}
		if s.AdditionalProperties == nil || *s.AdditionalProperties {
			t.Errorf("%s: the server refuses unknown fields; the schema must say additionalProperties: false", rt.Name)
		}
		if code, p := post(`{"no_such_field":1}`); code != http.StatusBadRequest || !strings.Contains(p.Type, "unknown-field") {
			t.Errorf("%s: an unknown field got %d %s", rt.Name, code, p.Type)
		}
		if code, _ := post(""); (code == http.StatusBadRequest) != op.RequestBody.Required {
			t.Errorf("%s: an empty body got %d; the document says required=%v", rt.Name, code, op.RequestBody.Required)
		}
	}
	if bodies == 0 {
		t.Error("no operation documents a request body")
	}
}

// TestOpenAPIQueryParameters checks the documented query parameters against
// the server: each is known to its route, and an undocumented one is refused.
func TestOpenAPIQueryParameters(t *testing.T) {
	a, execID := newTestAPI(t, nil)
	h := a.srv.Handler()
	doc := loadOpenAPI(t, h)
	for _, rt := range a.srv.Routes() {
		if rt.Method != "GET" || rt.Roles == nil || rt.Name == "metrics" {
			continue // public routes and /metrics take no parameters and check none
		}
		op := doc.Paths[openAPIPath(rt.Path)][strings.ToLower(rt.Method)]
		get := func(query string) (int, api.Problem) {
			req := localRequest("GET", samplePath(rt, execID)+"?"+query, nil)
			if strings.HasPrefix(rt.Name, "feed") {
				ctx, cancel := context.WithCancel(req.Context())
				cancel() // a feed then returns once it has started
				req = req.WithContext(ctx)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			var p api.Problem
			_ = json.Unmarshal(rec.Body.Bytes(), &p)
			return rec.Code, p
		}
		for _, p := range op.Parameters {
			if p.In != "query" {
				continue
			}
			if code, prob := get(p.Name + "=1"); code == http.StatusBadRequest && strings.Contains(prob.Detail, "unknown query parameter") {
				t.Errorf("%s: documented query parameter %q is refused: %s", rt.Name, p.Name, prob.Detail)
			}
		}
		if code, prob := get("no_such_param=1"); code != http.StatusBadRequest || !strings.Contains(prob.Detail, "unknown query parameter") {
			t.Errorf("%s: an undocumented query parameter got %d %q", rt.Name, code, prob.Detail)
		}
	}
}
