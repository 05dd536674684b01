// Package feedproxy is a test proxy for server-sent event feeds: it ends the
// first connection of one feed after a number of messages, shortens the
// reconnection delay the server asks for, and records the Last-Event-ID of
// every request of that feed, so a test can check that a client resumes
// without a gap or a duplicate.
package feedproxy

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Proxy forwards everything to its upstream and drops one feed's first
// connection.
type Proxy struct {
	URL string // where clients connect

	upstream string
	path     string
	n        int
	rest     http.Handler

	mu     sync.Mutex
	lastID []string
}

// Start runs a proxy to upstream that ends the first connection of the feed
// at path after n messages. It stops when the test ends.
func Start(t testing.TB, upstream, path string, n int) *Proxy {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{upstream: upstream, path: path, n: n, rest: httputil.NewSingleHostReverseProxy(target)}
	srv := httptest.NewServer(p)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	p.URL = srv.URL
	return p
}

// LastIDs returns the Last-Event-ID header of every request of the feed so
// far, in order ("" for none).
func (p *Proxy) LastIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lastID)
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != p.path {
		p.rest.ServeHTTP(w, r)
		return
	}
	p.mu.Lock()
	p.lastID = append(p.lastID, r.Header.Get("Last-Event-ID"))
	first := len(p.lastID) == 1
	p.mu.Unlock()
	req, err := http.NewRequestWithContext(r.Context(), "GET", p.upstream+r.URL.RequestURI(), nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	br := bufio.NewReader(resp.Body)
	for messages := 0; ; {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		if strings.HasPrefix(line, "retry:") {
			line = "retry: 5\n"
		}
		if strings.HasPrefix(line, "id:") {
			messages++
		}
		_, _ = io.WriteString(w, line)
		if line == "\n" {
			w.(http.Flusher).Flush()
			if first && messages == p.n {
				return // the end of the first connection
			}
		}
	}
}
