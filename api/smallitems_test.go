package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/internal/waitfor"
)

// TestUnservedRunnerIsAcceptedAndSaysSo: an action whose runner no live
// worker registered is defined (a remote worker may serve it later), and
// every view of it says nobody serves it; a built-in that the in-process
// workers serve says it is served.
func TestUnservedRunnerIsAcceptedAndSaysSo(t *testing.T) {
	e := newE2E(t)
	var defined wire.Action
	e.mustJSON("POST", "/api/v1/actions", map[string]any{"ref": "remote.charge", "runner": "billing.charge"}, http.StatusCreated, &defined)
	if defined.Served {
		t.Errorf("define answered served=true for a runner nobody registered")
	}
	e.define("local.echo", "core.echo", 1)
	var served map[string]bool
	waitfor.That(t, "local.echo served (the in-process workers register core.echo), remote.charge not", func() bool {
		var list wire.ActionList
		e.mustJSON("GET", "/api/v1/actions", nil, http.StatusOK, &list)
		served = map[string]bool{}
		for _, a := range list.Actions {
			served[a.Ref] = a.Served
		}
		return served["local.echo"] && !served["remote.charge"]
	}, waitfor.Note(func() string { return fmt.Sprintf("served flags %v", served) }))
	var one wire.Action
	e.mustJSON("GET", "/api/v1/actions/remote.charge", nil, http.StatusOK, &one)
	if one.Served {
		t.Error("GET /actions/remote.charge says served")
	}
	e.mustJSON("GET", "/api/v1/actions/local.echo", nil, http.StatusOK, &one)
	if !one.Served {
		t.Error("GET /actions/local.echo says not served")
	}
	// its executions wait for a worker instead of failing
	id := e.request("remote.charge", map[string]any{})
	time.Sleep(200 * time.Millisecond)
	var x wire.Execution
	e.mustJSON("GET", "/api/v1/executions/"+id, nil, http.StatusOK, &x)
	if x.Status != string(domain.StatusRequested) && x.Status != string(domain.StatusScheduling) {
		t.Errorf("an execution of an unserved runner is %s", x.Status)
	}
}

// TestWithItemsParentListsNoWorker: a with_items parent runs on no worker,
// so GET /api/v1/workers never lists a worker named "" (while it runs or
// after).
func TestWithItemsParentListsNoWorker(t *testing.T) {
	e := newE2E(t)
	e.define("items.sleep", "core.sleep", 1)
	var acc wire.Accepted
	e.mustJSON("POST", "/api/v1/executions", map[string]any{"action": "items.sleep", "input": map[string]any{"seconds": 0.2},
		"with_items": []any{map[string]any{}, map[string]any{}}, "concurrency": 1}, http.StatusAccepted, &acc)
	checkWorkers := func(when string) {
		var ws wire.WorkerList
		e.mustJSON("GET", "/api/v1/workers", nil, http.StatusOK, &ws)
		for _, w := range ws.Workers {
			if w.ID == "" {
				t.Errorf("%s: /api/v1/workers lists a worker named \"\": %+v", when, w)
			}
		}
	}
	e.waitStatus(acc.ID, domain.StatusRunning)
	checkWorkers("while the parent runs")
	parent := e.waitStatus(acc.ID, domain.StatusCompleted)
	if parent.Worker != "" {
		t.Errorf("the parent names worker %q", parent.Worker)
	}
	checkWorkers("after the parent ended")
}

// TestFeedStartBeyondHead: a feed asked to resume after a position the log
// has not reached answers 400 naming the head, at once, instead of waiting
// in silence; at the head it opens.
func TestFeedStartBeyondHead(t *testing.T) {
	a, _ := newTestAPI(t, nil)
	head, err := a.store.Head(context.Background())
	if err != nil || head == 0 {
		t.Fatalf("head %d: %v", head, err)
	}
	p := newPlainHTTP(t, a)
	for _, feed := range []string{"events", "executions", "queue-stats"} {
		url := p.url + "/api/v1/feeds/" + feed
		for _, c := range []struct {
			query, lastID string
			want          int
			detail        string
		}{
			{"", strconv.FormatUint(head+5, 10), 400, "its last position is " + strconv.FormatUint(head-1, 10)},
			{"", strconv.FormatUint(head, 10), 400, "beyond the log's head"},
			{"?from=" + strconv.FormatUint(head+1, 10), "", 400, "the next event will take position " + strconv.FormatUint(head, 10)},
			{"", strconv.FormatUint(head-1, 10), 200, ""},
			{"?from=" + strconv.FormatUint(head, 10), "", 200, ""},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			req, _ := http.NewRequestWithContext(ctx, "GET", url+c.query, nil)
			if c.lastID != "" {
				req.Header.Set("Last-Event-ID", c.lastID)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				cancel()
				t.Fatalf("%s%s Last-Event-ID %s: %v", feed, c.query, c.lastID, err)
			}
			var prob api.Problem
			if resp.StatusCode != 200 {
				_ = json.NewDecoder(resp.Body).Decode(&prob)
			}
			resp.Body.Close()
			cancel()
			if resp.StatusCode != c.want || !strings.Contains(prob.Detail, c.detail) {
				t.Errorf("%s%s Last-Event-ID %q: %d %q, want %d saying %q", feed, c.query, c.lastID, resp.StatusCode, prob.Detail, c.want, c.detail)
			}
		}
	}
}
