// Command stallbench measures what clients that do not play along cost a
// running turnstile serve: N feed clients that open /api/v1/feeds/events
// from position 0 and never read, and N request senders that announce a
// body and send one byte of it a second. It samples the server's resident
// memory (VmRSS of --pid) before, while the clients hold on, and after,
// and says how many connections the server cut and how fast.
//
//	turnstile serve --data /tmp/d --addr 127.0.0.1:8090 &
//	go run ./scripts/stallbench --url http://127.0.0.1:8090 --pid $! --events 70000 --clients 500
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	base := flag.String("url", "http://127.0.0.1:8090", "the server")
	pid := flag.Int("pid", 0, "the server's process id (for its RSS)")
	events := flag.Int("events", 70000, "fill the log up to at least this many events first")
	clients := flag.Int("clients", 500, "stalled feed clients, then slow senders")
	hold := flag.Duration("hold", 40*time.Second, "how long each kind of client holds on")
	flag.Parse()
	u, err := url.Parse(*base)
	if err != nil {
		fail(err)
	}
	fill(*base, *events)
	fmt.Printf("baseline RSS %s\n", mib(rss(*pid)))

	// Stalled feed clients: each with its own token (the per-token cap
	// would refuse the rest from one address), reading nothing.
	var conns []net.Conn
	refused := 0
	for i := range *clients {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			fail(err)
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4096)
		}
		fmt.Fprintf(c, "GET /api/v1/feeds/events?from=0 HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer stall-%d\r\n\r\n", u.Host, i)
		conns = append(conns, c)
	}
	peak := sample(*pid, *hold)
	// How many the server cut: a read now ends (EOF or reset) after the bytes it sent.
	var cutN atomic.Int64
	var cw sync.WaitGroup
	for _, c := range conns {
		cw.Add(1)
		go func() {
			defer cw.Done()
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			if _, err := io.Copy(io.Discard, c); err == nil || !isTimeout(err) {
				cutN.Add(1)
			}
			c.Close()
		}()
	}
	cw.Wait()
	cut := cutN.Load()
	fmt.Printf("%d stalled feed clients (log of %d+ events): peak RSS %s over %v; %d cut by the server, %d refused\n",
		*clients, *events, mib(peak), *hold, cut, refused)
	time.Sleep(3 * time.Second)
	fmt.Printf("after they left: RSS %s\n", mib(rss(*pid)))

	// Slow senders: a 64 KiB body announced, one byte a second.
	var cutSenders atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	var cutAt sync.Map
	for i := range *clients {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			fail(err)
		}
		fmt.Fprintf(c, "POST /api/v1/executions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 65536\r\n\r\n{", u.Host)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			go func() {
				r := bufio.NewReader(c)
				if resp, err := http.ReadResponse(r, nil); err == nil {
					resp.Body.Close()
					cutAt.Store(i, time.Since(start))
					cutSenders.Add(1)
				}
			}()
			for t := time.Now(); time.Since(t) < *hold; time.Sleep(time.Second) {
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		}()
	}
	peak = sample(*pid, *hold)
	wg.Wait()
	var last time.Duration
	cutAt.Range(func(_, v any) bool { last = max(last, v.(time.Duration)); return true })
	fmt.Printf("%d slow senders (1 byte/s): peak RSS %s over %v; %d answered (408) and cut, the last after %v\n",
		*clients, mib(peak), *hold, cutSenders.Load(), last.Round(time.Second))
	time.Sleep(3 * time.Second)
	fmt.Printf("after they left: RSS %s\n", mib(rss(*pid)))
}

// fill requests executions of a core.noop action until the log holds at
// least n events.
func fill(base string, n int) {
	post := func(path, body string) (*http.Response, error) {
		return http.Post(base+path, "application/json", strings.NewReader(body))
	}
	if resp, err := post("/api/v1/actions", `{"ref":"stall.noop","runner":"core.noop","max_concurrent":64}`); err == nil {
		resp.Body.Close()
	}
	head := func() int {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			fail(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		i := bytes.Index(b, []byte(`"head":`))
		if i < 0 {
			return 0
		}
		v, _ := strconv.Atoi(digits(b[i+7:]))
		return v
	}
	for head() < n {
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 100 {
					resp, err := post("/api/v1/executions", `{"action":"stall.noop","input":{"pad":"`+strings.Repeat("x", 200)+`"}}`)
					if err != nil {
						fail(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
		wg.Wait()
	}
	time.Sleep(2 * time.Second)
	fmt.Printf("log filled: head %d\n", head())
}

func digits(b []byte) string {
	i := 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return string(b[:i])
}

// sample returns the highest RSS seen over d.
func sample(pid int, d time.Duration) int64 {
	var peak int64
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		peak = max(peak, rss(pid))
	}
	return peak
}

func rss(pid int) int64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		fail(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "stallbench:", err)
	os.Exit(1)
}
