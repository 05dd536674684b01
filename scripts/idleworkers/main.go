// Command idleworkers measures what registered remote workers cost a
// turnstile server while they wait, and how fast a handoff reaches one of
// many: it registers --n workers of the Go worker package (client/worker),
// each with one slot, all serving the runner "idle.common" and the last one
// also "idle.last"; keeps them long-polling for --idle while it samples the
// server's RSS and CPU time from /proc (the server's --pid, on this
// machine); then requests --requests executions of an action whose runner
// only the last worker serves, one at a time, and reports request → handler
// start (the handler runs once the worker's running report is accepted, so
// this bounds request → running from above).
//
//	turnstile serve --workers 0 --token worker:w:WSECRET --token admin:a:ASECRET &
//	go run ./scripts/idleworkers --server http://127.0.0.1:8080 --worker-token WSECRET --admin-token ASECRET --pid $!
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/turnstile/turnstile/client"
	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/client/worker"
)

func main() {
	server := flag.String("server", "http://127.0.0.1:8080", "the server's base URL")
	wtok := flag.String("worker-token", "", "a token of role worker")
	atok := flag.String("admin-token", "", "a token of role admin (defines the action, requests executions)")
	n := flag.Int("n", 500, "workers to register")
	idle := flag.Duration("idle", 30*time.Second, "how long to sample the idle server")
	pid := flag.Int("pid", 0, "the server's process id (for /proc; 0: no samples)")
	requests := flag.Int("requests", 500, "executions of the last worker's action, requested one at a time")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	ctx, stop := context.WithCancel(context.Background())
	started := make(chan time.Time, 1)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := 1; i <= *n; i++ {
		w := worker.New(worker.Config{Server: *server, Token: *wtok, Name: fmt.Sprintf("idle-%03d", i), Slots: 1, Logger: log})
		w.Handle("idle.common", func(context.Context, worker.Job) (any, error) { return nil, nil })
		if i == *n {
			w.Handle("idle.last", func(context.Context, worker.Job) (any, error) { started <- time.Now(); return nil, nil })
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(ctx) }()
	}
	c, err := client.New(*server, client.WithToken(*atok))
	check(err)
	live := waitLive(c, *atok, *server, *n)
	fmt.Printf("registered: %d live workers after %s\n", live, time.Since(t0).Round(time.Millisecond))

	if *pid > 0 {
		rss0, cpu0 := sample(*pid)
		peak := rss0
		t1 := time.Now()
		for time.Since(t1) < *idle {
			time.Sleep(time.Second)
			if r, _ := sample(*pid); r > peak {
				peak = r
			}
		}
		rss1, cpu1 := sample(*pid)
		wall := time.Since(t1).Seconds()
		fmt.Printf("idle %.1fs: server RSS %d → %d KiB (peak %d KiB), CPU %.2fs = %.1f%% of one core\n",
			wall, rss0, rss1, peak, cpu1-cpu0, 100*(cpu1-cpu0)/wall)
	}

	_, _, err = c.DefineAction(ctx, wire.Policy{Ref: "idle.last", Runner: "idle.last", MaxConcurrent: 1})
	check(err)
	var lat []time.Duration
	for i := 0; i < *requests; i++ {
		sent := time.Now()
		if _, err := c.RequestExecution(ctx, wire.ExecutionRequest{Action: "idle.last"}); err != nil {
			check(err)
		}
		select {
		case at := <-started:
			lat = append(lat, at.Sub(sent))
		case <-time.After(30 * time.Second):
			check(fmt.Errorf("execution %d did not start in 30s", i))
		}
		time.Sleep(2 * time.Millisecond) // let the end report go before the next request
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	if len(lat) > 0 {
		fmt.Printf("request → handler start on worker %d of %d, %d executions one at a time: p50 %s p90 %s p99 %s max %s\n",
			*n, *n, len(lat), q(0.50).Round(10*time.Microsecond), q(0.90).Round(10*time.Microsecond), q(0.99).Round(10*time.Microsecond), lat[len(lat)-1].Round(10*time.Microsecond))
	}
	stop()
	wg.Wait()
}

// waitLive waits until the server lists n live workers (or 60s pass) and
// returns how many it lists.
func waitLive(c *client.Client, tok, server string, n int) int {
	deadline := time.Now().Add(60 * time.Second)
	live := 0
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest("GET", server+"/api/v1/workers", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			live = strings.Count(string(body), `"idle-`)
			var anyv any
			_ = json.Unmarshal(body, &anyv)
			if live >= n {
				return live
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	return live
}

// sample reads the process's resident set (KiB) and CPU time (user+system,
// seconds) from /proc.
func sample(pid int) (rssKiB int, cpu float64) {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	check(err)
	for _, line := range strings.Split(string(st), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			rssKiB, _ = strconv.Atoi(f[1])
		}
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	check(err)
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 (state) on
	ut, _ := strconv.ParseFloat(f[11], 64)                   // field 14 utime
	stt, _ := strconv.ParseFloat(f[12], 64)                  // field 15 stime
	return rssKiB, (ut + stt) / 100                          // USER_HZ = 100
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "idleworkers:", err)
		os.Exit(1)
	}
}
