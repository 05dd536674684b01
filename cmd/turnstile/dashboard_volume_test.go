package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cdpperf "github.com/chromedp/cdproto/performance"
	"github.com/chromedp/chromedp"
)

// TestDashboardVolume measures the dashboard with real volume (BENCHMARKS.md,
// "the dashboard"): a `turnstile serve` child process with 1,000 actions and
// one paused queue of 100,000 waiters, under a steady load of requests. It
// prints the server's CPU and RSS with no dashboard open and with 50 open
// (each one what the queues page does: whoami, all queue statistics, then
// the queue-stats feed), the cost of a page of the 100,000 waiters, and,
// with Chromium, how long the pages take to show and how many waiter rows
// the queue page holds (which must be one page, never the whole queue).
// Run with TURNSTILE_DASHBOARD_BENCH=1; it takes a few minutes.
func TestDashboardVolume(t *testing.T) {
	if os.Getenv("TURNSTILE_DASHBOARD_BENCH") == "" {
		t.Skip("set TURNSTILE_DASHBOARD_BENCH=1 to measure the dashboard with 1,000 actions, 100,000 waiters and 50 open dashboards")
	}
	const actions, waiters, dashboards, loadPerSec = 1000, 100_000, 50, 200
	addr := freeAddr(t)
	p := startProc(t, turnstileBinary(t), "serve", "serve", "--addr", addr, "--data", t.TempDir(), "--workers", "2", "--slots", "16")
	p.waitLog(t, `turnstile serving`)
	base := "http://" + addr
	pid := p.cmd.Process.Pid

	start := time.Now()
	parallel(t, 16, actions, func(i int) {
		uiCall(t, "POST", base+"/api/v1/actions", "", map[string]any{"ref": fmt.Sprintf("vol.a%04d", i), "runner": "core.noop", "max_concurrent": 2}, 201, nil)
	})
	t.Logf("defined %d actions in %v", actions, time.Since(start).Round(time.Millisecond))
	uiCall(t, "POST", base+"/api/v1/actions", "", map[string]any{"ref": "vol.big", "runner": "core.noop", "max_concurrent": 4, "max_queue_length": 200_000}, 201, nil)
	uiCall(t, "POST", base+"/api/v1/actions/vol.big/pause", "", nil, 200, nil)
	start = time.Now()
	parallel(t, 32, waiters, func(int) {
		uiCall(t, "POST", base+"/api/v1/executions", "", map[string]any{"action": "vol.big"}, 202, nil)
	})
	t.Logf("queued %d waiters in %v", waiters, time.Since(start).Round(time.Millisecond))

	// A steady load: loadPerSec requests a second over the 1,000 actions.
	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	var loaded atomic.Int64
	go func() {
		tick := time.NewTicker(time.Second / loadPerSec)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			<-tick.C
			go func(i int) {
				req, _ := http.NewRequestWithContext(ctx, "POST", base+"/api/v1/executions",
					strings.NewReader(fmt.Sprintf(`{"action":"vol.a%04d"}`, i%actions)))
				req.Header.Set("Content-Type", "application/json")
				if res, err := http.DefaultClient.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					loaded.Add(1)
				}
			}(i)
		}
	}()
	time.Sleep(3 * time.Second)

	const window = 20 * time.Second
	cpu0, rss0 := measure(t, pid, window)
	t.Logf("no dashboard: server CPU %.1f%% of one core, RSS %.1f MiB (load %d requests/s)", cpu0, rss0, loadPerSec)

	var dashCtx, stopDash = context.WithCancel(context.Background())
	defer stopDash()
	var msgs atomic.Int64
	openStart := time.Now()
	var opened sync.WaitGroup
	for i := 0; i < dashboards; i++ {
		opened.Add(1)
		go fakeDashboard(dashCtx, base, &opened, &msgs)
	}
	opened.Wait()
	t.Logf("%d dashboards opened (whoami, all statistics, feed) in %v", dashboards, time.Since(openStart).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	m0 := msgs.Load()
	cpu1, rss1 := measure(t, pid, window)
	t.Logf("%d dashboards: server CPU %.1f%% of one core, RSS %.1f MiB; %.0f feed messages/s to them in all",
		dashboards, cpu1, rss1, float64(msgs.Load()-m0)/window.Seconds())
	t.Logf("cost of %d open dashboards: +%.1f%% of one core, +%.1f MiB RSS", dashboards, cpu1-cpu0, rss1-rss0)

	// A page of the 100,000 waiters: what the queue page reads, at most once
	// a second while the queue changes.
	var lat []time.Duration
	for i := 0; i < 20; i++ {
		s := time.Now()
		uiCall(t, "GET", base+fmt.Sprintf("/api/v1/actions/vol.big/waiters?offset=%d&limit=50", (i*4999)%waiters), "", nil, 200, nil)
		lat = append(lat, time.Since(s))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("a page of 50 of the %d waiters: median %v, max %v", waiters, lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	stopDash()

	if _, err := lookChromium(); err != nil {
		t.Logf("no Chromium: the in-browser figures are not measured")
		return
	}
	tab := uiBrowser(t, context.Background())
	var ms float64
	uiRun(t, tab, chromedp.Navigate(base+"/ui/#/workers"), chromedp.WaitVisible("#who", chromedp.ByID))
	t.Logf("baseline, the workers page for 10 s (no per-event work): %s", longTasks(t, tab))
	uiRun(t, tab, chromedp.Evaluate(`window.__t0 = performance.now(); location.hash = '#/queues'`, nil),
		chromedp.WaitReady(`#q-rows [data-action="vol.a0999"]`, chromedp.ByQuery),
		chromedp.Evaluate(`performance.now() - window.__t0`, &ms))
	t.Logf("queues page with %d actions: rows shown %.0f ms after opening", actions+1, ms)
	t.Logf("queues page, 10 s of live updates at %d requests/s: %s", loadPerSec, longTasks(t, tab))
	var heap float64
	uiRun(t, tab, chromedp.Evaluate(`performance.memory ? performance.memory.usedJSHeapSize / 1048576 : -1`, &heap))
	t.Logf("queues page JS heap: %.1f MiB", heap)
	viewShot(t, tab, "volume-queues.png")

	uiRun(t, tab, chromedp.Evaluate(`window.__t0 = performance.now(); location.hash = '#/queue/vol.big'`, nil),
		chromedp.WaitVisible(`#qq-waiters tr`, chromedp.ByQuery),
		chromedp.Evaluate(`performance.now() - window.__t0`, &ms))
	rows := uiCount(t, tab, "#qq-waiters tr")
	t.Logf("queue page with %d waiters: first page shown %.0f ms after opening; %d waiter rows in the DOM", waiters, ms, rows)
	if rows != 50 {
		t.Errorf("the queue page holds %d waiter rows; want one page of 50", rows)
	}
	uiRun(t, tab, chromedp.Evaluate(`window.__t0 = performance.now(); [...document.querySelectorAll('.pager button')].find(b => b.textContent.startsWith('last')).click()`, nil))
	uiEventually(t, "the last page", 10*time.Second, func() string {
		if r := uiText(t, tab, "#qq-range"); !strings.HasSuffix(r, fmt.Sprintf("%d of %d", waiters, waiters)) {
			return r
		}
		return ""
	})
	uiRun(t, tab, chromedp.Evaluate(`performance.now() - window.__t0`, &ms))
	t.Logf("queue page: the last page of %d shown %.0f ms after the click (%d rows in the DOM)", waiters, ms, uiCount(t, tab, "#qq-waiters tr"))
	viewShot(t, tab, "volume-queue.png")
	t.Logf("load requests sent: %d", loaded.Load())
}

// fakeDashboard does what an open queues page does over HTTP: whoami, the
// statistics of every action, then the queue-stats feed from there, read
// until ctx ends.
func fakeDashboard(ctx context.Context, base string, opened *sync.WaitGroup, msgs *atomic.Int64) {
	get := func(path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
		return http.DefaultClient.Do(req)
	}
	if res, err := get("/api/v1/whoami"); err == nil {
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	pos := "0"
	if res, err := get("/api/v1/queue-stats"); err == nil {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if i := strings.Index(string(b), `"position":`); i >= 0 {
			pos = strings.TrimRight(strings.SplitN(string(b[i+11:]), ",", 2)[0], "}")
		}
	}
	res, err := get("/api/v1/feeds/queue-stats?from=" + pos)
	opened.Done()
	if err != nil {
		return
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "id: ") {
			msgs.Add(1)
		}
	}
}

// measure answers the process's CPU use (percent of one core) over window
// and its RSS at the end (MiB), from /proc.
func measure(t *testing.T, pid int, window time.Duration) (cpuPct, rssMiB float64) {
	t.Helper()
	c0 := cpuTicks(t, pid)
	time.Sleep(window)
	c1 := cpuTicks(t, pid)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			rssMiB = kb / 1024
		}
	}
	return float64(c1-c0) / 100 / window.Seconds() * 100, rssMiB // USER_HZ is 100 on Linux
}

func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64) // utime is field 14, stime 15
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

// parallel runs fn(0..n-1) on w goroutines.
func parallel(t *testing.T, w, n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < w; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n && !t.Failed(); i = int(next.Add(1) - 1) {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// longTasks watches the page for 10 s and tells how many long tasks (over
// 50 ms of wall time, the browser's measure of jank) ran, and what the
// DevTools metrics say of the same 10 s: the renderer's CPU time (which,
// unlike wall time, a crowded machine does not inflate) and the time spent
// in script, style and layout.
func longTasks(t *testing.T, tab context.Context) string {
	metrics := func() map[string]float64 {
		var ms []*cdpperf.Metric
		uiRun(t, tab, cdpperf.Enable(), chromedp.ActionFunc(func(ctx context.Context) (err error) {
			ms, err = cdpperf.GetMetrics().Do(ctx)
			return err
		}))
		out := map[string]float64{}
		for _, m := range ms {
			out[m.Name] = m.Value
		}
		return out
	}
	m0 := metrics()
	var out string
	uiRun(t, tab, chromedp.Evaluate(`new Promise(ok => { let n = 0, ms = 0; const o = new PerformanceObserver(l => { for (const e of l.getEntries()) { n++; ms += e.duration; } });
		o.observe({entryTypes: ['longtask']}); setTimeout(() => { o.disconnect(); ok(n + ' long tasks (> 50 ms wall), ' + ms.toFixed(0) + ' ms in all'); }, 10000); })`, &out, awaitPromise))
	m1 := metrics()
	d := func(k string) float64 { return (m1[k] - m0[k]) * 1000 } // seconds → ms
	return fmt.Sprintf("%s; main thread CPU %.0f ms (%.1f%% of a core), script %.0f ms, style %.0f ms, layout %.0f ms (wall)",
		out, d("ThreadTime"), d("ThreadTime")/100, d("ScriptDuration"), d("RecalcStyleDuration"), d("LayoutDuration"))
}
