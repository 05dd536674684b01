package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/turnstile/turnstile/client/wire"
)

// signIn opens the dashboard in a tab, gives the token the page asks for and
// waits until the page shows the token's role.
func signIn(t *testing.T, tctx context.Context, base, token, role string) {
	t.Helper()
	uiRun(t, tctx,
		chromedp.Navigate(base+"/"), // redirects to /ui/
		chromedp.WaitVisible("#login-token", chromedp.ByID),
		chromedp.SendKeys("#login-token", token, chromedp.ByID),
		chromedp.Click("#login-submit", chromedp.ByID),
		chromedp.WaitVisible(fmt.Sprintf(`#who[data-role=%q]`, role), chromedp.ByQuery),
	)
}

// queueFigures answers what the queues page shows for an action and what
// the API reports, as "waiting active/limit".
func queueFigures(t *testing.T, tctx context.Context, base, ref string) (page, apiSays string) {
	var st wire.QueueStats
	uiCall(t, "GET", base+"/api/v1/actions/"+ref+"/queue-stats", readerToken, nil, 200, &st)
	row := fmt.Sprintf(`#q-rows [data-action=%q]`, ref)
	page = uiText(t, tctx, row+" .len") + " " + strings.ReplaceAll(uiText(t, tctx, row+" .active"), " ", "")
	return page, fmt.Sprintf("%d %d/%d", st.QueueLength, st.ActiveCount, st.MaxConcurrent)
}

// TestDashboardInBrowser drives the dashboard in headless Chromium against a
// real `turnstile serve` with tokens: the page asks for a token; the queues
// page shows the numbers the API reports as executions are submitted; a
// waiter cancelled from the queue page shows up as execution.cancelled in
// the log's live tail; the execution page steps back through its events;
// the audit button answers the verdict; a reader sees no cancel or pause
// controls; and after the server goes away and comes back (every feed
// dropped) the page resumes its feeds and catches up without a reload.
// Screenshots of each page are kept (the directory is printed).
func TestDashboardInBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bctx := uiBrowser(t, ctx)
	shots := artifactDir(t)
	srv := startRestartable(t, "--workers", "1", "--slots", "4", "--grace", "1s", "--token", "admin:"+adminToken, "--token", "reader:"+readerToken)
	base := srv.url()
	const ref = "ui.sleep"
	uiCall(t, "POST", base+"/api/v1/actions", adminToken, map[string]any{"ref": ref, "runner": "core.sleep", "max_concurrent": 1}, 201, nil)
	uiCall(t, "POST", base+"/api/v1/actions", adminToken, map[string]any{"ref": "ui.echo", "runner": "core.echo", "max_concurrent": 4}, 201, nil)
	const held = "ui.held" // paused: its figures change only by requests
	uiCall(t, "POST", base+"/api/v1/actions", adminToken, map[string]any{"ref": held, "runner": "core.noop", "max_concurrent": 1}, 201, nil)
	uiCall(t, "POST", base+"/api/v1/actions/"+held+"/pause", adminToken, nil, 200, nil)

	tab := bctx
	signIn(t, tab, base, adminToken, "admin")
	uiRun(t, tab, chromedp.WaitVisible(`#q-rows [data-action="ui.sleep"]`, chromedp.ByQuery))
	uiRun(t, tab, chromedp.Evaluate(`window.__sameDocument = 1`, nil)) // gone if the page reloads

	// Submitting changes the numbers on the page to those of the API.
	var ids []string
	for i := 0; i < 5; i++ {
		var acc wire.Accepted
		req := map[string]any{"action": ref, "input": map[string]any{"seconds": 120}}
		if i == 4 {
			req["priority"] = 1 // shown in the queue page's priority column
		}
		uiCall(t, "POST", base+"/api/v1/executions", adminToken, req, 202, &acc)
		ids = append(ids, acc.ID)
	}
	for i := 0; i < 20; i++ {
		uiCall(t, "POST", base+"/api/v1/executions", adminToken, map[string]any{"action": "ui.echo", "input": map[string]any{"n": i}}, 202, nil)
	}
	uiEventually(t, "the queues page shows the API's figures for "+ref, 30*time.Second, func() string {
		page, want := queueFigures(t, tab, base, ref)
		if page != want || want != "4 1/1" {
			return fmt.Sprintf("page %q, API %q, want both \"4 1/1\"", page, want)
		}
		return ""
	})
	uiEventually(t, "ui.echo's completions on the page", 30*time.Second, func() string {
		if got := uiText(t, tab, `#q-rows [data-action="ui.echo"] .completed`); got != "20" {
			return "completed " + got
		}
		return ""
	})
	uiEventually(t, "the queues page's state column", 30*time.Second, func() string {
		if run, hold := uiText(t, tab, `#q-rows [data-action="ui.sleep"] .state`), uiText(t, tab, `#q-rows [data-action="ui.held"] .state`); run != "active" || hold != "paused" {
			return fmt.Sprintf("state %q for a queue that grants, %q for a paused one; want active, paused", run, hold)
		}
		return ""
	})
	screenshot(t, tab, shots, "queues.png")
	if os.Getenv("TURNSTILE_UPDATE_SCREENSHOT") == "1" { // docs/dashboard.md's picture, refreshed
		screenshot(t, tab, "../../docs", "dashboard.png")
	}

	// The queue page lists the waiters in FIFO order; cancel one from it.
	victim := ids[2] // ids[0] runs; ids[1..4] wait
	uiRun(t, tab, chromedp.Navigate(base+"/ui/#/queue/"+ref), chromedp.WaitVisible(`#qq-waiters tr`, chromedp.ByQuery))
	uiEventually(t, "four waiters in FIFO order", 30*time.Second, func() string {
		var got []string
		for i := 1; i <= uiCount(t, tab, "#qq-waiters tr"); i++ {
			got = append(got, uiText(t, tab, fmt.Sprintf("#qq-waiters tr:nth-child(%d) a", i)))
		}
		if strings.Join(got, ",") != strings.Join(ids[1:], ",") {
			return fmt.Sprintf("page %v, want %v", got, ids[1:])
		}
		var prio []string
		for _, id := range ids[1:] {
			prio = append(prio, uiText(t, tab, fmt.Sprintf(`#qq-waiters tr[data-id=%q] td:nth-child(3)`, id)))
		}
		if strings.Join(prio, ",") != "2,2,2,1" {
			return fmt.Sprintf("priorities on the page %v, want [2 2 2 1]", prio)
		}
		return ""
	})
	screenshot(t, tab, shots, "queue.png")
	uiRun(t, tab, chromedp.Click(fmt.Sprintf(`button.cancel[data-id=%q]`, victim), chromedp.ByQuery))
	uiEventually(t, "the cancelled waiter leaves the page", 30*time.Second, func() string {
		var x wire.Execution
		uiCall(t, "GET", base+"/api/v1/executions/"+victim, readerToken, nil, 200, &x)
		if x.Status != "cancelled" || uiCount(t, tab, fmt.Sprintf(`#qq-waiters tr[data-id=%q]`, victim)) != 0 {
			return "status " + x.Status + ", still listed: " + strconv.Itoa(uiCount(t, tab, fmt.Sprintf(`#qq-waiters tr[data-id=%q]`, victim)))
		}
		return ""
	})

	// The log's live tail shows it; the audit button answers OK.
	uiRun(t, tab, chromedp.Navigate(base+"/ui/#/log"))
	uiEventually(t, "execution.cancelled in the log's tail", 30*time.Second, func() string {
		if n := uiCount(t, tab, fmt.Sprintf(`#l-rows tr[data-type="execution.cancelled"] a[href="#/execution/%s"]`, victim)); n != 1 {
			return fmt.Sprintf("%d rows", n)
		}
		return ""
	})
	uiRun(t, tab, chromedp.Click("#l-audit", chromedp.ByID), chromedp.WaitVisible("#l-verdict-text", chromedp.ByID))
	if v := uiText(t, tab, "#l-verdict-text"); !strings.HasPrefix(v, "OK") {
		t.Errorf("audit verdict on the page: %q", v)
	}
	screenshot(t, tab, shots, "log.png")

	// The execution page: its timeline, and the state as of its first event.
	// Why a waiter waits: its execution page asks explain (ids[1] waits
	// behind ids[0], which holds the only slot for two minutes).
	uiRun(t, tab, chromedp.Navigate(base+"/ui/#/execution/"+ids[1]), chromedp.WaitVisible(`#x-explain`, chromedp.ByQuery))
	uiEventually(t, "the explain panel says the waiter waits for a slot", 30*time.Second, func() string {
		// ids[4] (priority 1) is first, then ids[1]: ids[2] was cancelled.
		if got := uiText(t, tab, "#x-explain"); !strings.Contains(got, "waiting for:") || !strings.Contains(got, "slot") || !strings.Contains(got, "number 2 in its queue, 1 ahead") {
			return "explain panel: " + got
		}
		return ""
	})
	uiRun(t, tab, chromedp.Navigate(base+"/ui/#/execution/"+victim), chromedp.WaitVisible(`#x-events tr[data-type="execution.cancelled"]`, chromedp.ByQuery))
	if s := uiText(t, tab, `#x-status .tag`); s != "cancelled" {
		t.Errorf("execution page status %q, want cancelled", s)
	}
	screenshot(t, tab, shots, "execution.png")
	uiRun(t, tab, chromedp.Evaluate(`(() => { const s = document.getElementById('x-slider'); s.value = 0; s.dispatchEvent(new Event('input')); s.dispatchEvent(new Event('change')); })()`, nil))
	uiEventually(t, "the state as of the first event", 30*time.Second, func() string {
		if s := uiText(t, tab, `#x-status .tag`); s != "requested" {
			return "status " + s
		}
		return ""
	})

	uiRun(t, tab, chromedp.Navigate(base+"/ui/#/workers"), chromedp.WaitVisible(`#w-rows tr[data-id="local-1"]`, chromedp.ByQuery))
	if s := uiText(t, tab, `#w-summary`); !strings.HasPrefix(s, "1 workers, 1 not lost") { // every page of GET /api/v1/workers, followed
		t.Errorf("workers page summary %q", s)
	}
	screenshot(t, tab, shots, "workers.png")

	// The schedules page: a schedule's ticks link to their executions, and
	// an admin pauses it from the page.
	const tickRow = `#s-rows tr[data-ref="ui.tick"]`
	uiCall(t, "POST", base+"/api/v1/schedules", adminToken, map[string]any{"ref": "ui.tick", "action": "ui.echo", "cron": "@every 1s", "input": map[string]any{"n": "tick"}}, 201, nil)
	uiRun(t, tab, chromedp.Navigate(base+"/ui/#/schedules"), chromedp.WaitVisible(tickRow, chromedp.ByQuery))
	uiEventually(t, "a completed tick on the schedules page", 30*time.Second, func() string {
		if uiCount(t, tab, tickRow+` a.tick[data-status="completed"]`) == 0 {
			return "ticks: " + uiText(t, tab, tickRow+" .ticks")
		}
		return ""
	})
	uiRun(t, tab, chromedp.Click(tickRow+" button.pause", chromedp.ByQuery))
	uiEventually(t, "the schedule paused from the page", 30*time.Second, func() string {
		var s wire.Schedule
		uiCall(t, "GET", base+"/api/v1/schedules/ui.tick", adminToken, nil, 200, &s)
		if page := uiText(t, tab, tickRow+" .state"); !s.Paused || page != "paused" {
			return fmt.Sprintf("API paused=%v, the page says %q", s.Paused, page)
		}
		return ""
	})
	screenshot(t, tab, shots, "schedules.png")

	// A reader sees no control it may not use (the server refuses anyway).
	reader, closeReader := newTab(t, bctx)
	signIn(t, reader, base, readerToken, "reader")
	uiRun(t, reader, chromedp.Navigate(base+"/ui/#/queue/"+ref), chromedp.WaitVisible(`#qq-waiters tr`, chromedp.ByQuery))
	if n := uiCount(t, reader, "button.cancel"); n != 0 {
		t.Errorf("a reader sees %d cancel buttons", n)
	}
	if uiText(t, reader, "#qq-pause") != "" && uiCount(t, reader, "#qq-pause:not([hidden])") != 0 {
		t.Errorf("a reader sees the pause button")
	}
	uiRun(t, reader, chromedp.Navigate(base+"/ui/#/schedules"), chromedp.WaitVisible(tickRow, chromedp.ByQuery))
	if n := uiCount(t, reader, "#s-rows button"); n != 0 {
		t.Errorf("a reader sees %d buttons on the schedules page", n)
	}
	closeReader()

	// Every feed drops: the server stops and starts again on the same
	// address and log. What happens meanwhile reaches the page through the
	// resumed feeds (Last-Event-ID), without a reload.
	uiRun(t, tab, chromedp.Navigate(base+"/ui/#/queues"), chromedp.WaitVisible(`#q-rows [data-action="ui.sleep"]`, chromedp.ByQuery),
		chromedp.Evaluate(`window.__sameDocument = 2`, nil))
	uiEventually(t, "the feed is live", 30*time.Second, func() string { return map[bool]string{true: "", false: "not live"}[uiText(t, tab, "#conn") == "live"] })
	for i := 0; i < 2; i++ {
		uiCall(t, "POST", base+"/api/v1/executions", adminToken, map[string]any{"action": held}, 202, nil)
	}
	uiEventually(t, "the page shows the held queue", 30*time.Second, func() string {
		if page, want := queueFigures(t, tab, base, held); page != want || want != "2 0/1" {
			return fmt.Sprintf("page %q, API %q, want both \"2 0/1\"; the page's rows: %q (hash %s)", page, want, uiText(t, tab, "#q-rows"), uiText(t, tab, "#main h1"))
		}
		return ""
	})
	before, _ := strconv.Atoi(uiAttr(t, tab, "#conn", "data-reconnects"))
	srv.stop()
	uiEventually(t, "the page notices the drop", 30*time.Second, func() string {
		n, _ := strconv.Atoi(uiAttr(t, tab, "#conn", "data-reconnects"))
		return map[bool]string{true: "", false: "no reconnect counted"}[n > before]
	})
	srv.start()
	for i := 0; i < 3; i++ {
		uiCall(t, "POST", base+"/api/v1/executions", adminToken, map[string]any{"action": held}, 202, nil)
	}
	uiEventually(t, "the queues page catches up after the drop", 30*time.Second, func() string {
		page, want := queueFigures(t, tab, base, held)
		if page != want || want != "5 0/1" {
			return fmt.Sprintf("page %q, API %q, want both \"5 0/1\"", page, want)
		}
		return ""
	})
	var same int
	uiRun(t, tab, chromedp.Evaluate(`window.__sameDocument || 0`, &same))
	if same != 2 {
		t.Errorf("the page reloaded (marker %d)", same)
	}
	if s := uiText(t, tab, "#conn"); s != "live" {
		t.Errorf("after the restart the feed badge says %q", s)
	}
	screenshot(t, tab, shots, "queues-after-restart.png")
}

func uiAttr(t *testing.T, tctx context.Context, sel, name string) string {
	t.Helper()
	var s string
	if err := chromedp.Run(tctx, chromedp.Evaluate(fmt.Sprintf(`(document.querySelector(%q) || {getAttribute(){return ""}}).getAttribute(%q) || ""`, sel, name), &s)); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDashboardAnonymousResumes: without tokens (loopback) the page asks for
// none, shows every control, and its feeds are EventSource's, which resume
// after a server restart with Last-Event-ID on their own: what happened
// while the server was away reaches the page without a reload.
func TestDashboardAnonymousResumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tab := uiBrowser(t, ctx)
	srv := startRestartable(t, "--workers", "1", "--grace", "1s")
	base := srv.url()
	const held = "anon.held"
	uiCall(t, "POST", base+"/api/v1/actions", "", map[string]any{"ref": held, "runner": "core.noop", "max_concurrent": 1}, 201, nil)
	uiCall(t, "POST", base+"/api/v1/actions/"+held+"/pause", "", nil, 200, nil)
	uiRun(t, tab, chromedp.Navigate(base+"/"), chromedp.WaitVisible(`#who`, chromedp.ByID),
		chromedp.WaitReady(`#q-rows [data-action="anon.held"]`, chromedp.ByQuery), chromedp.Evaluate(`window.__sameDocument = 3`, nil))
	if who := uiText(t, tab, "#who"); who != "anonymous (loopback)" {
		t.Errorf("header says %q", who)
	}
	uiCall(t, "POST", base+"/api/v1/executions", "", map[string]any{"action": held}, 202, nil)
	uiEventually(t, "one waiter on the page", 30*time.Second, func() string {
		if page, want := queueFigures(t, tab, base, held); page != want || want != "1 0/1" {
			return fmt.Sprintf("page %q, API %q", page, want)
		}
		return ""
	})
	before, _ := strconv.Atoi(uiAttr(t, tab, "#conn", "data-reconnects"))
	srv.stop()
	uiEventually(t, "the page notices the drop", 30*time.Second, func() string {
		n, _ := strconv.Atoi(uiAttr(t, tab, "#conn", "data-reconnects"))
		return map[bool]string{true: "", false: "no reconnect counted"}[n > before]
	})
	srv.start()
	for i := 0; i < 4; i++ {
		uiCall(t, "POST", base+"/api/v1/executions", "", map[string]any{"action": held}, 202, nil)
	}
	uiEventually(t, "the page catches up", 30*time.Second, func() string {
		if page, want := queueFigures(t, tab, base, held); page != want || want != "5 0/1" {
			return fmt.Sprintf("page %q, API %q, want both \"5 0/1\"", page, want)
		}
		return ""
	})
	var same int
	uiRun(t, tab, chromedp.Evaluate(`window.__sameDocument || 0`, &same))
	if same != 3 {
		t.Errorf("the page reloaded (marker %d)", same)
	}
	// Every control is there for the anonymous admin.
	uiRun(t, tab, chromedp.Navigate(base+"/ui/#/queue/"+held), chromedp.WaitVisible(`#qq-waiters tr`, chromedp.ByQuery))
	if n := uiCount(t, tab, "button.cancel"); n != 5 {
		t.Errorf("%d cancel buttons, want 5", n)
	}
	if uiCount(t, tab, "#qq-resume:not([hidden])") != 1 {
		t.Errorf("no resume button for the paused action")
	}
}
