package api_test

// Results are bounded (serve --max-result-bytes) and so are pages in bytes
// (projections.DefaultPageBytes): a client or a worker cannot make the
// server hold or build answers of gigabytes (issue #29, item 3).

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/node"
)

// bigObject returns a JSON object of exactly n bytes (n >= 8).
func bigObject(n int) string { return `{"s":"` + strings.Repeat("x", n-8) + `"}` }

// TestOversizedReportRefused: a remote worker's report whose result is
// larger than the server's bound is refused with 413 and a problem, alone
// or in a batch, and writes nothing: the execution stays running, and the
// same worker can then report a result that fits.
func TestOversizedReportRefused(t *testing.T) {
	l := startLive(t, 15*time.Second, 0)
	w := l.register(t, "w-big", `"big.runner"`)
	if code := l.post(t, secrets[api.RoleAdmin], "/api/v1/actions", `{"ref":"big","runner":"big.runner"}`, nil); code != 201 {
		t.Fatalf("define: %d", code)
	}
	var acc wire.Accepted
	if code := l.post(t, secrets[api.RoleClient], "/api/v1/executions", `{"action":"big","input":{}}`, &acc); code != 202 {
		t.Fatalf("request: %d", code)
	}
	if res, code := l.poll(t, w, `{"wait_seconds":10}`); code != 200 || len(res.Assignments) != 1 {
		t.Fatalf("poll: %d %+v", code, res)
	}
	if _, code := l.report(t, w, "w-big", `{"execution":"`+acc.ID+`","status":"running"}`); code != 200 {
		t.Fatalf("running: %d", code)
	}
	l.waitStatus(t, acc.ID, "running")

	h := l.head(t)
	over := bigObject(domain.DefaultMaxResultBytes + 1)
	for _, status := range []string{"completed", "failed"} {
		body := `{"execution":"` + acc.ID + `","status":"` + status + `","result":` + over + `}`
		req, _ := http.NewRequest("POST", l.url+"/api/v1/workers/w-big/report", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+w.Session)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p wire.Problem
		_ = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if resp.StatusCode != 413 || resp.Header.Get("Content-Type") != "application/problem+json" ||
			p.Type != "https://turnstile.dev/problems/result-too-large" || !strings.Contains(p.Detail, fmt.Sprint(domain.DefaultMaxResultBytes)) {
			t.Errorf("a %s report with a result of %d bytes: %d %+v", status, len(over), resp.StatusCode, p)
		}
	}
	var batch wire.WorkerReportResults
	if code := l.post(t, w.Session, "/api/v1/workers/w-big/report", `{"reports":[{"execution":"`+acc.ID+`","status":"completed","result":`+over+`}]}`, &batch); code != 200 ||
		len(batch.Results) != 1 || batch.Results[0].Problem == nil || batch.Results[0].Problem.Status != 413 {
		t.Errorf("a batch with an oversized result: %d %+v", code, batch)
	}
	if got := l.head(t); got != h {
		t.Fatalf("refused reports wrote %d events", got-h)
	}
	if x := l.execution(t, acc.ID); x.Status != "running" || x.Result != nil {
		t.Fatalf("after the refusals: %s %s", x.Status, x.Result)
	}
	fits := bigObject(domain.DefaultMaxResultBytes)
	if out, code := l.report(t, w, "w-big", `{"execution":"`+acc.ID+`","status":"completed","result":`+fits+`}`); code != 200 || out.Status != "completed" {
		t.Fatalf("a result at the bound: %d %+v", code, out)
	}
	if x := l.waitStatus(t, acc.ID, "completed"); string(x.Result) != fits {
		t.Errorf("the stored result is %d bytes, want %d", len(x.Result), len(fits))
	}
	l.audit(t)
}

// TestEchoResultOverTheLimitFails: an in-process run whose result is larger
// than the worker's bound fails, saying why, and stores no result.
func TestEchoResultOverTheLimitFails(t *testing.T) {
	e, _ := startE2E(t, memstore.New(memstore.Options{}), e2eSetup{node: node.Config{Workers: 1, Slots: 2, MaxResultBytes: 1024}})
	e.define("echo", "core.echo", 2)
	small := e.request("echo", json.RawMessage(bigObject(1024)))
	big := e.request("echo", json.RawMessage(bigObject(1025)))
	if v := e.waitStatus(small, domain.StatusCompleted); len(v.Result) != 1024 {
		t.Errorf("a result at the bound: %d bytes", len(v.Result))
	}
	v := e.waitStatus(big, domain.StatusFailed)
	if v.Result != nil || !strings.Contains(v.Error, "result too large") || !strings.Contains(v.Error, "1025 bytes, the limit is 1024") {
		t.Errorf("a result over the bound: %q, %d bytes of result", v.Error, len(v.Result))
	}
}

// listPage gets one page of executions and returns it with its body's size.
func listPage(t *testing.T, e *e2e, query string) (wire.ExecutionList, int) {
	t.Helper()
	status, _, body := e.do("GET", "/api/v1/executions?"+query, nil)
	if status != 200 {
		t.Fatalf("list %s: %d %s", query, status, body)
	}
	var page wire.ExecutionList
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	return page, len(body)
}

// TestListPagesAreBoundedInBytes: a page of executions ends at the byte
// budget, whatever its limit, and its cursor leads to the rest: every
// execution once, newest first; the events pages do the same.
func TestListPagesAreBoundedInBytes(t *testing.T) {
	e := newE2E(t)
	e.define("echo", "core.echo", 4)
	const n, size = 12, 200 << 10 // each execution's input and result: ~400 KiB a view
	want := make([]string, n)
	for i := range want {
		want[n-1-i] = e.request("echo", json.RawMessage(bigObject(size))) // newest first
	}
	for _, id := range want {
		e.waitStatus(id, domain.StatusCompleted)
	}
	var got []string
	pages := 0
	for after := ""; ; pages++ {
		q := "action=echo&limit=1000"
		if after != "" {
			q += "&after=" + after
		}
		page, bytes := listPage(t, e, q)
		if bytes > projections.DefaultPageBytes+2*size+4096 {
			t.Errorf("page %d is %d bytes, over the budget by more than one execution", pages, bytes)
		}
		if len(page.Executions) == 0 {
			t.Fatalf("page %d is empty (cursor %q)", pages, after)
		}
		for _, x := range page.Executions {
			got = append(got, x.ID)
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the pages gave %d executions %v, want %d %v", len(got), got, len(want), want)
	}
	if pages < n/3 {
		t.Errorf("%d executions of ~%d KiB came in %d pages: the budget did not cut them", n, 2*size>>10, pages+1)
	}
	// A small page is one page, as before.
	if page, _ := listPage(t, e, "action=echo&limit=2"); len(page.Executions) != 2 || page.Next != want[1] {
		t.Errorf("limit=2: %d executions, next %q", len(page.Executions), page.Next)
	}

	// The log's pages: every event once, in order, each page within the budget.
	var next uint64
	count := 0
	for pages = 0; ; pages++ {
		status, _, body := e.do("GET", fmt.Sprintf("/api/v1/events?from=%d&limit=1000", next), nil)
		var page wire.EventPage
		if status != 200 || json.Unmarshal(body, &page) != nil {
			t.Fatalf("events from %d: %d %s", next, status, body[:min(len(body), 200)])
		}
		if len(body) > projections.DefaultPageBytes+size+4096 {
			t.Errorf("events page %d is %d bytes", pages, len(body))
		}
		for _, ev := range page.Events {
			if ev.Position != next {
				t.Fatalf("events page %d: position %d, want %d", pages, ev.Position, next)
			}
			next++
			count++
		}
		if len(page.Events) == 0 {
			break
		}
		if page.Next != next {
			t.Fatalf("events page %d: next %d, want %d", pages, page.Next, next)
		}
	}
	head, _ := e.store.Head(t.Context())
	if uint64(count) != head || pages < 3 {
		t.Errorf("the events pages gave %d events in %d pages, the log holds %d", count, pages, head)
	}
}

// TestListMemoryIsBounded is the attack of issue #29: many results at the
// bound stored, then 8 concurrent lists of limit=1000. The heap those
// requests can add is at most what they allocate (runtime.MemStats
// TotalAlloc, counted across the requests): it stays under 64 MiB, where
// without the page budget each request built the whole list (here 40
// executions of 512 KiB, input and result, several copies each: about
// 1 GiB allocated for the 8).
func TestListMemoryIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("stores 20 MiB of executions")
	}
	e := newE2E(t)
	e.define("echo", "core.echo", 8)
	const n = 40
	obj := json.RawMessage(bigObject(domain.MaxInputBytes)) // core.echo's result is its input: 256 KiB each
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.request("echo", obj)
	}
	for _, id := range ids {
		e.waitStatus(id, domain.StatusCompleted)
	}
	const bound = 64 << 20
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(e.url + "/api/v1/executions?action=echo&limit=1000")
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
				t.Errorf("list: %d %v", resp.StatusCode, err)
			}
		}()
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > bound {
		t.Errorf("8 concurrent lists of limit=1000 over %d executions of %d KiB allocated %d MiB, the bound is %d MiB",
			n, 2*domain.MaxInputBytes>>10, got>>20, bound>>20)
	} else {
		t.Logf("8 concurrent lists allocated %d MiB (bound %d MiB)", got>>20, bound>>20)
	}
}
