package runner

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// privateOK is the runner_config of an action allowed internal addresses:
// the test servers listen on loopback.
const privateOK = `{"allow_private":true}`

// echoServer answers every request with a JSON description of it, status from
// the "status" query parameter, and sets X-Reply: yes.
func echoServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("X-Reply", "yes")
		w.Header().Add("X-Multi", "1")
		w.Header().Add("X-Multi", "2")
		switch r.URL.Query().Get("status") {
		case "404":
			w.WriteHeader(http.StatusNotFound)
		case "500":
			w.WriteHeader(http.StatusInternalServerError)
		case "302":
			http.Redirect(w, r, "/landed", http.StatusFound)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"method":       r.Method,
			"path":         r.URL.Path,
			"host":         r.Host,
			"content_type": r.Header.Get("Content-Type"),
			"x_token":      r.Header.Values("X-Token"),
			"body":         string(body),
		})
	}))
	t.Cleanup(srv.Close)
	return srv
}

type httpTestResult struct {
	Status        int                 `json:"status"`
	Headers       map[string][]string `json:"headers"`
	Body          string              `json:"body"`
	BodyTruncated bool                `json:"body_truncated"`
	seen          map[string]any
}

func decodeHTTPResult(t *testing.T, raw json.RawMessage) httpTestResult {
	t.Helper()
	var res httpTestResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
	_ = json.Unmarshal([]byte(res.Body), &res.seen)
	return res
}

func TestHTTPSuccess(t *testing.T) {
	t.Parallel()
	srv := echoServer(t)
	r := withConfig(mustRunner(t, Config{HTTPClient: srv.Client()}, NameHTTP), privateOK)
	tests := []struct {
		name       string
		input      map[string]any
		wantStatus int
		wantSeen   map[string]any // fields the server must have seen
	}{
		{name: "default GET", input: map[string]any{"url": srv.URL + "/a"}, wantStatus: 200,
			wantSeen: map[string]any{"method": "GET", "path": "/a", "body": "", "content_type": ""}},
		{name: "lower-case method and headers", input: map[string]any{"method": "delete", "url": srv.URL,
			"headers": map[string]any{"x-token": "t1"}}, wantStatus: 200,
			wantSeen: map[string]any{"method": "DELETE", "x_token": []any{"t1"}}},
		{name: "multi-valued header", input: map[string]any{"url": srv.URL,
			"headers": map[string]any{"X-Token": []string{"a", "b"}}}, wantStatus: 200,
			wantSeen: map[string]any{"x_token": []any{"a", "b"}}},
		{name: "JSON object body", input: map[string]any{"method": "POST", "url": srv.URL,
			"body": map[string]any{"k": []int{1, 2}}}, wantStatus: 200,
			wantSeen: map[string]any{"method": "POST", "content_type": "application/json", "body": `{"k":[1,2]}`}},
		{name: "JSON array body", input: map[string]any{"method": "PUT", "url": srv.URL, "body": []int{1}}, wantStatus: 200,
			wantSeen: map[string]any{"content_type": "application/json", "body": `[1]`}},
		{name: "string body as is", input: map[string]any{"method": "POST", "url": srv.URL, "body": "a=1&b={}",
			"headers": map[string]any{"Content-Type": "application/x-www-form-urlencoded"}}, wantStatus: 200,
			wantSeen: map[string]any{"content_type": "application/x-www-form-urlencoded", "body": "a=1&b={}"}},
		{name: "explicit content type wins", input: map[string]any{"method": "PATCH", "url": srv.URL, "body": map[string]any{},
			"headers": map[string]any{"Content-Type": "application/merge-patch+json"}}, wantStatus: 200,
			wantSeen: map[string]any{"content_type": "application/merge-patch+json", "body": `{}`}},
		{name: "host header", input: map[string]any{"url": srv.URL, "headers": map[string]any{"Host": "example.test"}},
			wantStatus: 200, wantSeen: map[string]any{"host": "example.test"}},
		{name: "redirect followed", input: map[string]any{"url": srv.URL + "/?status=302"}, wantStatus: 200,
			wantSeen: map[string]any{"path": "/landed"}},
		{name: "404 is a result", input: map[string]any{"url": srv.URL + "/?status=404"}, wantStatus: 404,
			wantSeen: map[string]any{"method": "GET"}},
		{name: "500 is a result", input: map[string]any{"url": srv.URL + "/?status=500", "fail_on_status": false}, wantStatus: 500},
		{name: "fail_on_status with 200", input: map[string]any{"url": srv.URL, "fail_on_status": true}, wantStatus: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in, _ := json.Marshal(tt.input)
			out, err := r.Run(context.Background(), in)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			res := decodeHTTPResult(t, out)
			if res.Status != tt.wantStatus {
				t.Fatalf("status %d, want %d", res.Status, tt.wantStatus)
			}
			if got := res.Headers["X-Reply"]; len(got) != 1 || got[0] != "yes" {
				t.Fatalf("X-Reply = %v in %v", got, res.Headers)
			}
			if got := res.Headers["X-Multi"]; len(got) != 2 {
				t.Fatalf("X-Multi = %v", got)
			}
			if res.BodyTruncated {
				t.Fatal("body reported truncated")
			}
			for k, want := range tt.wantSeen {
				gotJSON, _ := json.Marshal(res.seen[k])
				wantJSON, _ := json.Marshal(want)
				if string(gotJSON) != string(wantJSON) {
					t.Errorf("server saw %s = %s, want %s", k, gotJSON, wantJSON)
				}
			}
		})
	}
}

func TestHTTPFailOnStatus(t *testing.T) {
	t.Parallel()
	srv := echoServer(t)
	r := withConfig(mustRunner(t, Config{HTTPClient: srv.Client()}, NameHTTP), privateOK)
	for _, status := range []string{"404", "500"} {
		t.Run(status, func(t *testing.T) {
			t.Parallel()
			in, _ := json.Marshal(map[string]any{"url": srv.URL + "/?status=" + status, "fail_on_status": true})
			out, err := r.Run(context.Background(), in)
			if out != nil {
				t.Fatalf("result %s alongside a failure", out)
			}
			f := asFailure(t, err)
			if !strings.Contains(f.Message, "status "+status) {
				t.Fatalf("failure %q", f.Message)
			}
			if res := decodeHTTPResult(t, f.Result); res.Status == 0 || res.Body == "" {
				t.Fatalf("failure result %s lacks status or body", f.Result)
			}
		})
	}
}

func TestHTTPBodyBounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		max           int
		body          string
		wantBody      string
		wantTruncated bool
	}{
		{"fits exactly", 5, "abcde", "abcde", false},
		{"cut", 5, "abcdefgh", "abcde", true},
		{"cut inside a rune", 5, "abcdé", "abcd", true},
		{"large", 100, strings.Repeat("x", 1<<20), strings.Repeat("x", 100), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			r := withConfig(mustRunner(t, Config{HTTPClient: srv.Client(), MaxOutputBytes: tt.max}, NameHTTP), privateOK)
			out, err := r.Run(context.Background(), json.RawMessage(`{"url":"`+srv.URL+`"}`))
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			res := decodeHTTPResult(t, out)
			if res.Body != tt.wantBody || res.BodyTruncated != tt.wantTruncated {
				t.Fatalf("body %q (truncated %v), want %q (%v)", res.Body, res.BodyTruncated, tt.wantBody, tt.wantTruncated)
			}
		})
	}
}

func TestHTTPContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body" {
			w.WriteHeader(200)
			_, _ = io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	// Cleanups (not defers): the parallel subtests run after this function returns.
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	r := withConfig(mustRunner(t, Config{HTTPClient: srv.Client()}, NameHTTP), privateOK)
	tests := []struct {
		name    string
		path    string
		timeout bool
		want    error
	}{
		{"cancel waiting for headers", "/", false, context.Canceled},
		{"deadline waiting for headers", "/", true, context.DeadlineExceeded},
		{"cancel reading the body", "/body", false, context.Canceled},
		{"deadline reading the body", "/body", true, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var ctx context.Context
			var cancel context.CancelFunc
			if tt.timeout {
				ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
			} else {
				ctx, cancel = context.WithCancel(context.Background())
				time.AfterFunc(100*time.Millisecond, cancel)
			}
			defer cancel()
			start := time.Now()
			out, err := r.Run(ctx, json.RawMessage(`{"url":"`+srv.URL+tt.path+`"}`))
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("returned after %s", d)
			}
			if out != nil {
				t.Fatalf("result %s", out)
			}
			checkCtxErr(t, err, tt.want)
		})
	}
}

func TestHTTPFailure(t *testing.T) {
	t.Parallel()
	// An address nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + l.Addr().String() + "/"
	_ = l.Close()

	client := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	r := withConfig(mustRunner(t, Config{HTTPClient: client}, NameHTTP), privateOK)
	tests := []struct {
		name    string
		input   string
		wantMsg string
	}{
		{"connection refused", `{"url":"` + closedURL + `"}`, "core.http: GET"},
		{"no url", `{"method":"GET"}`, `invalid input: "url" is required`},
		{"bad method", `{"method":"TRACE","url":"http://x/"}`, `invalid input: "method"`},
		{"made-up method", `{"method":"FROB","url":"http://x/"}`, `invalid input: "method"`},
		{"ftp", `{"url":"ftp://x/"}`, "scheme must be http or https"},
		{"file", `{"url":"file:///etc/passwd"}`, "scheme must be http or https"},
		{"relative url", `{"url":"/path"}`, "scheme must be http or https"},
		{"no host", `{"url":"http:///path"}`, "no host"},
		{"unparsable url", `{"url":"http://[::1"}`, `invalid input: "url"`},
		{"unknown field", `{"url":"http://x/","timeout":1}`, `unknown field "timeout"`},
		{"bad header name", `{"url":"http://x/","headers":{"a b":"c"}}`, "invalid name"},
		{"header CRLF", `{"url":"http://x/","headers":{"A":"b\r\nEvil: 1"}}`, "invalid value"},
		{"header number", `{"url":"http://x/","headers":{"A":1}}`, "invalid input"},
		{"header null", `{"url":"http://x/","headers":{"A":null}}`, "invalid input"},
		{"two hosts", `{"url":"http://x/","headers":{"Host":["a","b"]}}`, "Host takes exactly one value"},
		{"fail_on_status not bool", `{"url":"http://x/","fail_on_status":"yes"}`, "invalid input"},
		{"not an object", `"http://x/"`, "invalid input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := r.Run(context.Background(), json.RawMessage(tt.input))
			if out != nil {
				t.Fatalf("result %s", out)
			}
			f := asFailure(t, err)
			if !strings.Contains(f.Message, tt.wantMsg) {
				t.Fatalf("failure %q, want it to contain %q", f.Message, tt.wantMsg)
			}
			if f.Result != nil {
				t.Fatalf("failure carries result %s", f.Result)
			}
		})
	}
}

func TestHTTPDisabled(t *testing.T) {
	t.Parallel()
	if _, ok := Builtins(Config{Enabled: AllBuiltins, DisableHTTP: true, ShellAllowRoot: true}).Lookup(NameHTTP); ok {
		t.Fatal("core.http registered although disabled")
	}
}
