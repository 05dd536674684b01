package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/wire"
)

// problemOf posts body with secret and returns the status and the problem's detail.
func (l *liveAPI) problemOf(t *testing.T, secret, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", l.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
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
