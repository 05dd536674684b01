package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/wire"
)

// The fuzz tests drive the real handler over a memstore with any input and
// check what API.md promises: no panic, only documented statuses (never
// 500 for bad input), every error a problem+json document with a detail,
// nothing appended to the log by a rejected request, and every response
// UTF-8 (as JSON must be).

// fuzzBodyLimit is the body limit of the fuzzed server: small, so that the
// seed corpus can hold an oversized body.
const fuzzBodyLimit = 2 << 10

type fuzzTarget struct {
	a      *testAPI
	h      http.Handler
	codes  map[string]map[int]bool // operationId → the statuses it documents
	execID string
	log    *lockedBuffer
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newFuzzTarget(f *testing.F) *fuzzTarget {
	f.Helper()
	log := &lockedBuffer{}
	a, execID := startAPI(f, api.Config{MaxBodyBytes: fuzzBodyLimit, Logger: slog.New(slog.NewTextHandler(log, nil))})
	ft := &fuzzTarget{a: a, h: a.srv.Handler(), codes: map[string]map[int]bool{}, execID: execID, log: log}
	doc := loadOpenAPI(f, ft.h)
	for _, ops := range doc.Paths {
		for _, op := range ops {
			ft.codes[op.OperationID] = map[int]bool{}
			for code := range op.Responses {
				if n, err := strconv.Atoi(code); err == nil {
					ft.codes[op.OperationID][n] = true
				}
			}
		}
	}
	return ft
}

// request builds a request whose path is given decoded (as the router
// matches it), so any string can be a path segment.
func request(method, path, rawQuery, body string) *http.Request {
	req := localRequest(method, "/", strings.NewReader(body))
	req.URL.Path = path
	req.URL.RawPath = ""
	req.URL.RawQuery = rawQuery
	return req
}

// escapedSegment reports whether s, escaped as a client escapes a path
// segment, names one segment of a clean path: otherwise the router does not
// route it to the operation (404, or a redirect to the clean path).
func escapedSegment(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.Contains(s, "/")
}

// serve runs req through the handler and checks the response against what
// operation op documents.
func (ft *fuzzTarget) serve(t *testing.T, op string, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	ctx := context.Background()
	before, err := ft.a.store.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	ft.h.ServeHTTP(rec, req)
	after, err := ft.a.store.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	code, body := rec.Code, rec.Body.Bytes()
	if !utf8.Valid(body) {
		t.Fatalf("%s: %d with a body that is not UTF-8: %q", op, code, body)
	}
	if code == http.StatusInternalServerError {
		t.Fatalf("%s: 500 for %s %s: %s\nserver log:\n%s", op, req.Method, req.URL, body, ft.log.String())
	}
	if !ft.codes[op][code] {
		t.Fatalf("%s: undocumented status %d for %s %s: %s", op, code, req.Method, req.URL, body)
	}
	if code < 300 {
		if ct := rec.Header().Get("Content-Type"); ct == "application/json" && !json.Valid(body) {
			t.Fatalf("%s: %d with a body that is not JSON: %q", op, code, body)
		}
		return rec
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%s: %d with Content-Type %q", op, code, ct)
	}
	var p api.Problem
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("%s: %d with a problem that does not decode (%v): %q", op, code, err, body)
	}
	if p.Status != code || p.Type == "" || p.Title == "" || strings.TrimSpace(p.Detail) == "" {
		t.Fatalf("%s: %d with an incomplete problem %+v", op, code, p)
	}
	if after != before {
		t.Fatalf("%s: a rejected request (%d %s) appended %d events", op, code, p.Detail, after-before)
	}
	return rec
}

func FuzzCreateAction(f *testing.F) {
	ft := newFuzzTarget(f)
	f.Add(`{"ref":"fz.a","runner":"core.noop"}`)
	f.Add(`{"ref":"fz.r","runner":"core.fail","retry":{"max_attempts":3,"backoff_seconds":0.5,"backoff_multiplier":2,"max_backoff_seconds":30}}`)
	f.Add(`{"ref":"fz.r","runner":"core.fail","retry":{"max_attempts":0,"backoff_seconds":-1}}`)
	f.Fuzz(func(t *testing.T, body string) {
		rec := ft.serve(t, "createAction", request("POST", "/api/v1/actions", "", body))
		if rec.Code == http.StatusCreated || rec.Code == http.StatusOK {
			var v struct{ Ref, Runner string }
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || v.Ref == "" || v.Runner == "" {
				t.Fatalf("%d with %q: %v", rec.Code, rec.Body.Bytes(), err)
			}
		}
	})
}

func FuzzRequestExecution(f *testing.F) {
	ft := newFuzzTarget(f)
	f.Add(`{"action":"demo","input":{"seconds":0.1}}`, "")
	f.Add(`{"action":"demo"}`, "key-1")
	f.Add(`{"action":"demo","priority":1,"delay_seconds":2.5}`, "")
	f.Add(`{"action":"demo","priority":9,"run_at":"2026-13-01T00:00:00Z"}`, "key-2")
	f.Fuzz(func(t *testing.T, body, idempotencyKey string) {
		req := request("POST", "/api/v1/executions", "", body)
		if idempotencyKey != "" {
			req.Header.Set("Idempotency-Key", idempotencyKey)
		}
		rec := ft.serve(t, "requestExecution", req)
		if rec.Code == http.StatusAccepted {
			var v struct{ ID, Status string }
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || v.ID == "" || v.Status == "" {
				t.Fatalf("202 with %q: %v", rec.Body.Bytes(), err)
			}
			// What was accepted reads back (as UTF-8 JSON).
			if got := ft.serve(t, "getExecution", request("GET", "/api/v1/executions/"+v.ID, "", "")); got.Code != http.StatusOK {
				t.Fatalf("GET the accepted execution %s: %d", v.ID, got.Code)
			}
		}
	})
}

func FuzzChangePolicy(f *testing.F) {
	ft := newFuzzTarget(f)
	f.Add("demo", `{"runner":"core.sleep","max_concurrent":3}`)
	f.Fuzz(func(t *testing.T, ref, body string) {
		if !escapedSegment(ref) {
			return
		}
		ft.serve(t, "changePolicy", request("PUT", "/api/v1/actions/"+ref+"/policy", "", body))
	})
}

func FuzzCancel(f *testing.F) {
	ft := newFuzzTarget(f)
	f.Add(ft.execID, `{"reason":"enough"}`)
	f.Add(ft.execID, "")
	f.Fuzz(func(t *testing.T, id, body string) {
		if !escapedSegment(id) {
			return
		}
		ft.serve(t, "cancelExecution", request("POST", "/api/v1/executions/"+id+"/cancel", "", body))
	})
}

// bodyRoutes are the routes with a body that FuzzOtherBodies drives (the
// others have their own fuzz test).
var bodyRoutes = []struct{ op, method, path string }{
	{"pauseAction", "POST", "/api/v1/actions/demo/pause"},
	{"resumeAction", "POST", "/api/v1/actions/demo/resume"},
	{"rebuild", "POST", "/api/v1/admin/rebuild"},
}

func FuzzOtherBodies(f *testing.F) {
	ft := newFuzzTarget(f)
	f.Add(uint8(0), `{"reason":"maintenance"}`)
	f.Add(uint8(1), ``)
	f.Add(uint8(2), `{}`)
	f.Add(uint8(2), `[[[[`)
	f.Fuzz(func(t *testing.T, route uint8, body string) {
		rt := bodyRoutes[int(route)%len(bodyRoutes)]
		ft.serve(t, rt.op, request(rt.method, rt.path, "", body))
	})
}

// queryRoutes are the routes FuzzQueryParams drives, by the seed's route byte.
var queryRoutes = []struct{ op, path string }{
	{"listExecutions", "/api/v1/executions"},
	{"events", "/api/v1/events"},
	{"feedExecutions", "/api/v1/feeds/executions"},
	{"feedQueueStats", "/api/v1/feeds/queue-stats"},
	{"feedEvents", "/api/v1/feeds/events"},
	{"stream", "/api/v1/streams/action-demo"},
	{"getExecution", "/api/v1/executions/{id}"},
	{"allQueueStats", "/api/v1/queue-stats"},
	{"listActions", "/api/v1/actions"},
	{"getAction", "/api/v1/actions/demo"},
	{"actionQueueStats", "/api/v1/actions/demo/queue-stats"},
	{"actionQueue", "/api/v1/actions/demo/queue"},
	{"executionEvents", "/api/v1/executions/{id}/events"},
	{"workers", "/api/v1/workers"},
}

func FuzzQueryParams(f *testing.F) {
	ft := newFuzzTarget(f)
	f.Add(uint8(0), "status=requested&limit=10", "")
	f.Add(uint8(2), "from=0&action=demo", "")
	f.Add(uint8(4), "", "3")
	f.Add(uint8(10), "as_of=3", "")
	f.Add(uint8(12), "from=1&limit=2", "")
	f.Fuzz(func(t *testing.T, route uint8, rawQuery, lastEventID string) {
		rt := queryRoutes[int(route)%len(queryRoutes)]
		req := request("GET", strings.Replace(rt.path, "{id}", url.PathEscape(ft.execID), 1), rawQuery, "")
		if lastEventID != "" {
			req.Header.Set("Last-Event-ID", lastEventID)
		}
		feed := strings.HasPrefix(rt.op, "feed")
		if feed {
			ctx, cancel := context.WithCancel(req.Context())
			cancel() // the feed returns once it has started (and sent what it had)
			req = req.WithContext(ctx)
		}
		rec := ft.serve(t, rt.op, req)
		if feed && rec.Code == http.StatusOK && rec.Header().Get("Content-Type") != "text/event-stream" {
			t.Fatalf("%s: 200 with Content-Type %q", rt.op, rec.Header().Get("Content-Type"))
		}
	})
}

// TestIdempotencyKeyReused is a fuzz finding: the same Idempotency-Key with
// another body was a 500 (the event id derived from the stream made the
// store refuse the append before the command could compare the requests);
// it is a 409, and a replay of the same request says so in a header.
func TestIdempotencyKeyReused(t *testing.T) {
	a, _ := newTestAPI(t, nil)
	post := func(body string) (int, map[string]any) {
		req := request("POST", "/api/v1/executions", "", body)
		req.Header.Set("Idempotency-Key", "order-42")
		rec := httptest.NewRecorder()
		a.srv.Handler().ServeHTTP(rec, req)
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%d %q: %v", rec.Code, rec.Body.Bytes(), err)
		}
		out["replayed"] = rec.Header().Get("Idempotent-Replayed")
		return rec.Code, out
	}
	code, first := post(`{"action":"demo","input":{"seconds":1}}`)
	if code != http.StatusAccepted || first["replayed"] != "" {
		t.Fatalf("first request: %d %v", code, first)
	}
	for _, body := range []string{`{"action":"demo","input":{"seconds":1}}`, `{"action":"demo","input":{ "seconds" : 1 }}`} {
		if code, again := post(body); code != http.StatusAccepted || again["id"] != first["id"] || again["replayed"] != "true" {
			t.Errorf("the same request again (%s): %d %v, want 202 with id %v, replayed", body, code, again, first["id"])
		}
	}
	code, other := post(`{"action":"demo","input":{"seconds":2}}`)
	if code != http.StatusConflict || other["type"] != "https://turnstile.dev/problems/idempotency-key-reused" {
		t.Errorf("another request with the same key: %d %v, want 409 idempotency-key-reused", code, other)
	}
}

// TestLastEventIDOverflow is a fuzz finding: Last-Event-ID 2^64-1 wrapped
// around and replayed a feed from position 0; it is a 400.
func TestLastEventIDOverflow(t *testing.T) {
	a, _ := newTestAPI(t, nil)
	for _, path := range []string{"/api/v1/feeds/events", "/api/v1/feeds/executions", "/api/v1/feeds/queue-stats"} {
		req := request("GET", path, "", "")
		req.Header.Set("Last-Event-ID", "18446744073709551615")
		ctx, cancel := context.WithCancel(req.Context())
		cancel() // were it accepted, the feed would return once started
		rec := httptest.NewRecorder()
		a.srv.Handler().ServeHTTP(rec, req.WithContext(ctx))
		if rec.Code != http.StatusBadRequest {
			t.Errorf("%s: Last-Event-ID 2^64-1 got %d, want 400", path, rec.Code)
		}
	}
}

// TestInvalidUTF8Body is a fuzz finding: a body with invalid UTF-8 in an
// execution's input was accepted, and the execution was then served as
// JSON that is not UTF-8; it is a 400.
func TestInvalidUTF8Body(t *testing.T) {
	a, _ := newTestAPI(t, nil)
	rec := httptest.NewRecorder()
	a.srv.Handler().ServeHTTP(rec, request("POST", "/api/v1/executions", "", "{\"action\":\"demo\",\"input\":{\"s\":\"\xc3\x28\"}}"))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "not UTF-8") {
		t.Errorf("got %d %s, want 400 (not UTF-8)", rec.Code, rec.Body.String())
	}
}

// keyCounts returns how many object keys the JSON text raw holds and how
// many remain once each object keeps one value per key (what
// encoding/json's last-wins decoding keeps): they differ exactly when some
// object names a key twice. ok is false when raw is not one JSON value.
func keyCounts(raw []byte) (keys, distinct int, ok bool) {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return 0, 0, false
	}
	var count func(any) int
	count = func(v any) int {
		n := 0
		switch x := v.(type) {
		case map[string]any:
			n += len(x)
			for _, e := range x {
				n += count(e)
			}
		case []any:
			for _, e := range x {
				n += count(e)
			}
		}
		return n
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	type level struct{ object, wantKey bool }
	var stack []level
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if d, isDelim := tok.(json.Delim); isDelim {
			switch d {
			case '{', '[':
				if len(stack) > 0 && stack[len(stack)-1].object {
					stack[len(stack)-1].wantKey = true
				}
				stack = append(stack, level{object: d == '{', wantKey: true})
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		}
		if n := len(stack); n > 0 && stack[n-1].object {
			if stack[n-1].wantKey {
				keys++
			}
			stack[n-1].wantKey = !stack[n-1].wantKey
		}
	}
	return keys, count(v), true
}

// FuzzStrictBodies: whatever the body, an accepted request holds no key
// twice in any object (checked against an oracle that counts keys apart
// from the server's walker), its top-level keys are the exact names of the
// documented fields, and an accepted input is a JSON object.
func FuzzStrictBodies(f *testing.F) {
	ft := newFuzzTarget(f)
	f.Add(`{"action":"demo","input":{"seconds":0.1}}`, false)
	f.Add(`{"Action":"demo","input":{}}`, false)
	f.Add(`{"action":"demo","input":{"a":1,"a":2}}`, false)
	f.Add(`{"action":"demo","input":null}`, false)
	f.Add(`{"action":"demo","input":{"x":[{"y":1,"Y":2}]}}`, false)
	f.Add(`{"ref":"fz.b","runner":"core.noop","RUNNER":"x"}`, true)
	f.Add(`{"ref":"fz.c","runner":"core.noop","rate_limit":{"count":1,"count":2,"per_seconds":1}}`, true)
	fields := map[bool]map[string]bool{
		false: {"action": true, "input": true, "with_items": true, "concurrency": true},
		true:  {},
	}
	for _, name := range jsonFields(reflect.TypeOf(wire.Policy{})) {
		fields[true][name] = true
	}
	f.Fuzz(func(t *testing.T, body string, define bool) {
		op, path := "requestExecution", "/api/v1/executions"
		if define {
			op, path = "createAction", "/api/v1/actions"
		}
		rec := ft.serve(t, op, request("POST", path, "", body))
		if rec.Code >= 300 {
			return
		}
		keys, distinct, ok := keyCounts([]byte(body))
		if !ok || keys != distinct {
			t.Fatalf("%s accepted %q (%d keys, %d distinct)", op, body, keys, distinct)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body), &top); err != nil {
			t.Fatalf("%s accepted a body that is no object: %q", op, body)
		}
		for k := range top {
			if !fields[define][k] {
				t.Fatalf("%s accepted the key %q in %q", op, k, body)
			}
		}
		if in, ok := top["input"]; ok && !define && !bytes.HasPrefix(bytes.TrimSpace(in), []byte("{")) {
			t.Fatalf("%s accepted the input %s", op, in)
		}
	})
}

// FuzzParseTokens: any spec parses or fails without a panic, an error never
// shows the secret, and an accepted spec makes exactly one named token.
func FuzzParseTokens(f *testing.F) {
	for _, s := range []string{"admin:0123456789abcdef", "client:alice:0123456789abcdef:scope=billing.",
		"client:al:ice:0123456789abcdef", "reader::0123456789abcdef", "worker:w:0123456789abcdef:scope=:scope=a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		toks, err := api.ParseTokens([]string{spec})
		parts := strings.Split(strings.TrimSpace(spec), ":")
		secret := ""
		switch {
		case len(parts) == 2:
			secret = parts[1]
		case len(parts) > 2:
			secret = parts[2]
		}
		if err != nil {
			if len(secret) >= 16 && strings.Contains(err.Error(), secret) {
				t.Fatalf("the error shows the secret: %v", err)
			}
			// what may be a secret or its rest: a long role (a secret given
			// without one), every part after the secret but a scope= option
			suspects := parts[min(3, len(parts)):]
			if len(parts[0]) > 10 {
				suspects = append(suspects, parts[0])
			}
			for _, part := range suspects {
				if len(part) >= 8 && !strings.HasPrefix(part, "scope=") && strings.Contains(err.Error(), part) {
					t.Fatalf("the error shows %q, which may be part of a secret: %v", part, err)
				}
			}
			return
		}
		if strings.TrimSpace(spec) != "" && len(toks.Names()) != 1 {
			t.Fatalf("%q made tokens %v", spec, toks.Names())
		}
	})
}
