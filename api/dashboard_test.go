package api_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/internal/waitfor"
)

// TestWaitersPages: GET …/waiters pages the FIFO queue (offset 0 is the next
// to be granted), counts every waiter in total, lists the active ones, and
// refuses bad paging with a 400 problem.
func TestWaitersPages(t *testing.T) {
	e := newE2E(t)
	e.define("ui.page", "core.sleep", 1)
	var ids []string
	for i := 0; i < 7; i++ {
		ids = append(ids, e.request("ui.page", map[string]any{"seconds": 30}))
	}
	e.waitStatus(ids[0], "running")
	defer func() { // a sleeping run would hold the node's stop for its grace
		for _, id := range ids {
			e.do("POST", "/api/v1/executions/"+id+"/cancel", nil)
		}
		e.waitStatus(ids[0], "cancelled")
	}()
	var pg wire.WaiterPage
	waitfor.That(t, "6 waiters of ui.page", func() bool {
		e.mustJSON("GET", "/api/v1/actions/ui.page/waiters?offset=2&limit=3", nil, http.StatusOK, &pg)
		return pg.Total == 6
	})
	var got []string
	for _, w := range pg.Waiting {
		got = append(got, w.ID)
	}
	if pg.Total != 6 || pg.Offset != 2 || strings.Join(got, ",") != strings.Join(ids[3:6], ",") || len(pg.Active) != 1 || pg.Active[0] != ids[0] {
		t.Errorf("page = total %d offset %d waiting %v active %v; want total 6 offset 2 waiting %v active [%s]", pg.Total, pg.Offset, got, pg.Active, ids[3:6], ids[0])
	}
	e.mustJSON("GET", "/api/v1/actions/ui.page/waiters?offset=100", nil, http.StatusOK, &pg)
	if pg.Total != 6 || len(pg.Waiting) != 0 {
		t.Errorf("past the end: total %d, %d waiting; want 6 and none", pg.Total, len(pg.Waiting))
	}
	for _, q := range []string{"limit=0", "limit=1001", "offset=-1", "limit=x", "page=2"} {
		status, h, body := e.do("GET", "/api/v1/actions/ui.page/waiters?"+q, nil)
		if status != http.StatusBadRequest || !strings.HasPrefix(h.Get("Content-Type"), "application/problem+json") {
			t.Errorf("?%s: %d %s, want a 400 problem", q, status, body)
		}
	}
	if status, _, body := e.do("GET", "/api/v1/actions/nope/waiters", nil); status != http.StatusNotFound {
		t.Errorf("an unknown action: %d %s, want 404", status, body)
	}
}

// TestAuditRoute: GET /api/v1/audit answers the audit of the whole log.
func TestAuditRoute(t *testing.T) {
	e := newE2E(t)
	e.define("ui.audit", "core.noop", 2)
	id := e.request("ui.audit", map[string]any{})
	e.waitStatus(id, "completed")
	var v wire.AuditVerdict
	e.mustJSON("GET", "/api/v1/audit", nil, http.StatusOK, &v)
	if !v.OK || v.Executions != 1 || v.Ended != 1 || v.Events < 5 || v.ByStatus["completed"] != 1 || v.Violations == nil {
		t.Errorf("verdict %+v; want OK, 1 execution ended, its events counted", v)
	}
	if status, _, body := e.do("GET", "/api/v1/audit?x=1", nil); status != http.StatusBadRequest {
		t.Errorf("an unknown parameter: %d %s, want 400", status, body)
	}
}

// TestWhoAmIAndDashboardFiles: whoami answers the token's role (anonymous
// admin without tokens); the dashboard's files are served to anyone (they
// hold no data) with a strict Content-Security-Policy, / redirects to them,
// and the routes they read still need a token.
func TestWhoAmIAndDashboardFiles(t *testing.T) {
	a, _ := newTestAPI(t, allTokens(t))
	hs := httptest.NewServer(a.srv.Handler())
	defer hs.Close()
	get := func(path, token string) (*http.Response, string) {
		req, _ := http.NewRequest("GET", hs.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	for role, secret := range secrets {
		res, body := get("/api/v1/whoami", secret)
		if res.StatusCode != 200 || !strings.Contains(body, `"role":"`+string(role)+`"`) || !strings.Contains(body, `"anonymous":false`) {
			t.Errorf("whoami as %s: %d %s", role, res.StatusCode, body)
		}
	}
	if res, _ := get("/api/v1/whoami", ""); res.StatusCode != 401 {
		t.Errorf("whoami without a token: %d, want 401", res.StatusCode)
	}
	if res, _ := get("/api/v1/audit", secrets["worker"]); res.StatusCode != 403 {
		t.Errorf("audit as a worker: %d, want 403", res.StatusCode)
	}
	if res, _ := get("/", ""); res.StatusCode != http.StatusFound || res.Header.Get("Location") != "/ui/" {
		t.Errorf("/: %d to %q, want a redirect to /ui/", res.StatusCode, res.Header.Get("Location"))
	}
	res, body := get("/ui/", "")
	if res.StatusCode != 200 || !strings.Contains(body, `<script type="module" src="main.js">`) || !strings.Contains(res.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Errorf("/ui/: %d, CSP %q, body %.200s", res.StatusCode, res.Header.Get("Content-Security-Policy"), body)
	}
	for _, f := range []string{"main.js", "core.js", "queues.js", "queue.js", "execution.js", "workers.js", "log.js", "style.css"} {
		if res, _ := get("/ui/"+f, ""); res.StatusCode != 200 {
			t.Errorf("/ui/%s: %d", f, res.StatusCode)
		}
	}
	if res, _ := get("/ui/nope.js", ""); res.StatusCode != 404 {
		t.Errorf("/ui/nope.js: %d, want 404", res.StatusCode)
	}
	req, _ := http.NewRequest("POST", hs.URL+"/ui/", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/: %d, want 405", res.StatusCode)
	}
}

// TestWhoAmIAnonymous: without tokens whoami says admin, anonymous.
func TestWhoAmIAnonymous(t *testing.T) {
	e := newE2E(t)
	var me wire.WhoAmI
	e.mustJSON("GET", "/api/v1/whoami", nil, http.StatusOK, &me)
	if me.Role != "admin" || !me.Anonymous {
		t.Errorf("whoami = %+v, want admin, anonymous", me)
	}
}

// TestWaitersPagesMatchTheQueue: with several keys (their queues interleaved
// by request position) every page of …/waiters is the same slice of the
// FIFO order GET …/queue lists whole.
func TestWaitersPagesMatchTheQueue(t *testing.T) {
	e := newE2E(t)
	e.mustJSON("POST", "/api/v1/actions", map[string]any{"ref": "ui.keys", "runner": "core.noop", "max_concurrent": 1, "concurrency_key": "c"}, http.StatusCreated, nil)
	e.mustJSON("POST", "/api/v1/actions/ui.keys/pause", nil, http.StatusOK, nil)
	for i := 0; i < 31; i++ {
		e.request("ui.keys", map[string]any{"c": fmt.Sprint("k", i*7%4)})
	}
	var whole wire.Queue
	deadline := time.Now().Add(10 * time.Second)
	for len(whole.Waiting) < 31 && time.Now().Before(deadline) {
		e.mustJSON("GET", "/api/v1/actions/ui.keys/queue", nil, http.StatusOK, &whole)
	}
	for offset := 0; offset <= 33; offset += 4 {
		for _, limit := range []int{1, 5, 40} {
			var pg wire.WaiterPage
			e.mustJSON("GET", fmt.Sprintf("/api/v1/actions/ui.keys/waiters?offset=%d&limit=%d", offset, limit), nil, http.StatusOK, &pg)
			want := whole.Waiting[min(offset, len(whole.Waiting)):min(offset+limit, len(whole.Waiting))]
			if pg.Total != len(whole.Waiting) || fmt.Sprint(pg.Waiting) != fmt.Sprint(want) {
				t.Errorf("offset %d limit %d: total %d, %v; want total %d, %v", offset, limit, pg.Total, pg.Waiting, len(whole.Waiting), want)
			}
		}
	}
}
