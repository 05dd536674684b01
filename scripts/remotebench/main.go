// Command remotebench drives a running turnstile (the API of `turnstile
// serve`, executors and workers in processes of their own) through the HTTP
// API alone, in the pattern of `turnstile bench lifecycle`: it defines
// --actions actions of runner --runner with --max-concurrent each, requests
// --executions executions from --submitters goroutines (one HTTP request
// each, optionally paced at --rate a second), waits until the queues' stats
// count them all ended, and then reads the log's events of the run back over
// the API (GET /api/v1/events) to measure from the log's commit times:
// executions/s from the first request to the last end, and request → running
// percentiles. The last line of its output is one JSON object.
//
// scripts/remotepg.sh runs it against PostgreSQL with the API, two executors
// and remote workers as separate processes (BENCHMARKS.md).
//
//	go run ./scripts/remotebench --server http://127.0.0.1:8080 --token ADMIN --executions 20000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/turnstile/turnstile/client"
	"github.com/turnstile/turnstile/client/wire"
)

func main() {
	server := flag.String("server", "http://127.0.0.1:8080", "the API's base URL")
	token := flag.String("token", "", "a token of role admin (defines actions, requests executions, reads the log)")
	n := flag.Int("executions", 20000, "executions to request")
	actions := flag.Int("actions", 10, "actions, each with its own FIFO queue")
	maxConc := flag.Int("max-concurrent", 10, "max_concurrent of every action")
	submitters := flag.Int("submitters", 64, "goroutines requesting executions one by one")
	rate := flag.Float64("rate", 0, "requests a second, paced evenly (0: as fast as the submitters go)")
	runner := flag.String("runner", "core.noop", "the actions' runner")
	prefix := flag.String("prefix", fmt.Sprintf("rb%d", time.Now().Unix()), "the actions' ref prefix (fresh per run by default)")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up when the run has not ended by then")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	c, err := client.New(*server, client.WithToken(*token))
	check(err)
	refs := make([]string, *actions)
	for i := range refs {
		refs[i] = fmt.Sprintf("%s.%d", *prefix, i)
		_, _, err := c.DefineAction(ctx, wire.Policy{Ref: refs[i], Runner: *runner, MaxConcurrent: *maxConc, MaxQueueLength: 1_000_000})
		check(err)
	}
	from := headOf(ctx, c, 0) // where the run's events start (AllEvents stops at the head it finds)

	fmt.Fprintf(os.Stderr, "remotebench: %d executions of %d actions × %d, %d submitters, from position %d\n", *n, *actions, *maxConc, *submitters, from)
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for range *submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(*n) {
					return
				}
				if *rate > 0 {
					if d := time.Until(t0.Add(time.Duration(float64(i) / *rate * float64(time.Second)))); d > 0 {
						time.Sleep(d)
					}
				}
				if _, err := c.RequestExecution(ctx, wire.ExecutionRequest{Action: refs[i%int64(len(refs))], Input: json.RawMessage(`{}`)}); err != nil {
					if failed.Add(1) <= 5 {
						fmt.Fprintf(os.Stderr, "remotebench: request %d: %v\n", i, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	fmt.Fprintf(os.Stderr, "remotebench: %d requested in %s (%d failed)\n", *n, time.Since(t0).Round(time.Millisecond), failed.Load())
	want := uint64(*n) - uint64(failed.Load())
	for {
		ended := uint64(0)
		list, err := c.AllQueueStats(ctx)
		check(err)
		for _, s := range list.QueueStats {
			if strings.HasPrefix(s.Action, *prefix+".") {
				ended += s.TotalCompleted + s.TotalFailed + s.TotalTimedOut + s.TotalRejected + s.TotalCancelled
			}
		}
		if ended >= want {
			break
		}
		if ctx.Err() != nil {
			check(fmt.Errorf("%d of %d ended when the timeout passed", ended, want))
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "remotebench: all ended after %s; reading the log from %d\n", time.Since(t0).Round(time.Millisecond), from)
	measure(ctx, c, from, *prefix, *n, int(failed.Load()))
}

// headOf returns the log's head: the position after its last event.
func headOf(ctx context.Context, c *client.Client, from uint64) uint64 {
	for {
		page, err := c.Events(ctx, from, 1000)
		check(err)
		if len(page.Events) == 0 {
			return from
		}
		from = page.Next
	}
}

// measure reads the log from position from and prints the run's figures.
func measure(ctx context.Context, c *client.Client, from uint64, prefix string, n, failed int) {
	type times struct{ requested, running, ended time.Time }
	mine := map[string]*times{} // execution stream → its times
	var first, last time.Time
	events := 0
	for ev, err := range c.AllEvents(ctx, from) {
		check(err)
		events++
		if !strings.HasPrefix(ev.Stream, "execution-") {
			continue
		}
		t := mine[ev.Stream]
		switch ev.Type {
		case "execution.requested":
			var d struct {
				Action string `json:"action"`
			}
			if json.Unmarshal(ev.Data, &d) != nil || !strings.HasPrefix(d.Action, prefix+".") {
				continue
			}
			t = &times{requested: ev.Time}
			mine[ev.Stream] = t
			if first.IsZero() || ev.Time.Before(first) {
				first = ev.Time
			}
		case "execution.running":
			if t != nil && t.running.IsZero() {
				t.running = ev.Time
			}
		case "execution.completed", "execution.failed", "execution.timed_out", "execution.cancelled", "execution.rejected":
			if t != nil && t.ended.IsZero() {
				t.ended = ev.Time
				if ev.Time.After(last) {
					last = ev.Time
				}
			}
		}
	}
	var lat []float64
	ended := 0
	for _, t := range mine {
		if !t.ended.IsZero() {
			ended++
		}
		if !t.running.IsZero() {
			lat = append(lat, float64(t.running.Sub(t.requested).Microseconds())/1000)
		}
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	secs := last.Sub(first).Seconds()
	out := map[string]any{"executions": n, "failed_requests": failed, "ended": ended, "seconds": round(secs), "executions_per_s": round(float64(ended) / secs),
		"p50_ms": round(pct(0.50)), "p90_ms": round(pct(0.90)), "p99_ms": round(pct(0.99)), "events": events}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}

func round(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "remotebench:", err)
		os.Exit(1)
	}
}
