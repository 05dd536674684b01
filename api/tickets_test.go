package api_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/wire"
)

// openFeedStatus opens a feed URL with no Authorization header (as an
// EventSource does) and returns its status and, for a 200, its first line.
func openFeedStatus(t *testing.T, url string, header ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, ""
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	return resp.StatusCode, line
}

func TestFeedTicket(t *testing.T) {
	p := newPrincipalAPI(t, api.Config{})
	var tk wire.FeedTicket
	h := p.must(aliceSecret, "POST", "/api/v1/feeds/ticket", "", http.StatusCreated, &tk)
	if tk.Ticket == "" || h.Get("Cache-Control") != "no-store" {
		t.Fatalf("ticket %+v, Cache-Control %q", tk, h.Get("Cache-Control"))
	}
	if left := time.Until(tk.ExpiresAt); left <= 50*time.Second || left > api.TicketTTL {
		t.Errorf("the ticket expires in %v, want about %v", left, api.TicketTTL)
	}
	for _, feed := range []string{"events", "executions", "queue-stats"} {
		if status, line := openFeedStatus(t, p.url+"/api/v1/feeds/"+feed+"?from=0&ticket="+tk.Ticket); status != 200 || !strings.HasPrefix(line, ": turnstile feed") {
			t.Errorf("feed %s with a ticket: %d %q", feed, status, line)
		}
	}
	// read-only: a ticket opens nothing but the feeds
	for _, c := range []struct{ method, path string }{
		{"GET", "/api/v1/workers?ticket=" + tk.Ticket},
		{"GET", "/api/v1/events?ticket=" + tk.Ticket},
		{"POST", "/api/v1/executions?ticket=" + tk.Ticket},
		{"POST", "/api/v1/feeds/ticket?ticket=" + tk.Ticket},
	} {
		if status, _, body := p.do("", c.method, c.path, `{"action":"demo","input":{}}`); status != http.StatusUnauthorized {
			t.Errorf("%s %s with a ticket and no token: %d %s, want 401", c.method, c.path, status, body)
		}
	}
	// forged, altered and foreign tickets are refused
	forged := strings.Replace(tk.Ticket, ".", "x.", 1)
	for _, bad := range []string{"nonsense", forged, tk.Ticket[:len(tk.Ticket)-2], "YWxpY2U.9999999999.AAAA"} {
		if status, _ := openFeedStatus(t, p.url+"/api/v1/feeds/events?ticket="+bad); status != http.StatusUnauthorized {
			t.Errorf("ticket %q: %d, want 401", bad, status)
		}
	}
	// a ticket carries its principal's scope
	var carols wire.FeedTicket
	p.must(carolSecret, "POST", "/api/v1/feeds/ticket", "", http.StatusCreated, &carols)
	if status, _ := openFeedStatus(t, p.url+"/api/v1/feeds/events?ticket="+carols.Ticket); status != http.StatusForbidden {
		t.Errorf("carol's ticket on the whole event feed: %d, want 403", status)
	}
	if status, _ := openFeedStatus(t, p.url+"/api/v1/feeds/events?action=billing.x&ticket="+carols.Ticket); status != http.StatusOK {
		t.Errorf("carol's ticket on her action's feed: %d, want 200", status)
	}
	// workers read no feeds, so they get no ticket
	p.must(workSecret, "POST", "/api/v1/feeds/ticket", "", http.StatusForbidden, nil)
	// another server with other tokens does not take it
	other, err := api.ParseTokens([]string{"client:alice:" + aliceSecret})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := startAPI(t, api.Config{Tokens: other})
	srv := httptest.NewServer(a.srv.Handler())
	defer srv.Close()
	if status, _ := openFeedStatus(t, srv.URL+"/api/v1/feeds/events?ticket="+tk.Ticket); status != http.StatusUnauthorized {
		t.Errorf("a ticket of another token set: %d, want 401", status)
	}
}

func TestCORS(t *testing.T) {
	p := newPrincipalAPI(t, api.Config{CORSOrigins: []string{"https://dash.example.com"}})
	// preflight
	status, h, _ := p.do("", "OPTIONS", "/api/v1/executions", "", "Origin", "https://dash.example.com", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "authorization,content-type")
	if status != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "https://dash.example.com" ||
		!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") {
		t.Errorf("preflight: %d %v", status, h)
	}
	// a real call from the origin carries the header, a problem too
	status, h, _ = p.do(readSecret, "GET", "/api/v1/actions", "", "Origin", "https://dash.example.com")
	if status != 200 || h.Get("Access-Control-Allow-Origin") != "https://dash.example.com" || !strings.Contains(h.Get("Vary"), "Origin") {
		t.Errorf("GET from the origin: %d %v", status, h)
	}
	if status, h, _ = p.do("", "GET", "/api/v1/actions", "", "Origin", "https://dash.example.com"); status != 401 || h.Get("Access-Control-Allow-Origin") == "" {
		t.Errorf("a 401 from the origin: %d %v (the page must be able to read the problem)", status, h)
	}
	// other origins get nothing
	status, h, _ = p.do("", "OPTIONS", "/api/v1/executions", "", "Origin", "https://evil.example", "Access-Control-Request-Method", "POST")
	if h.Get("Access-Control-Allow-Origin") != "" || status == http.StatusNoContent {
		t.Errorf("preflight from another origin: %d %v", status, h)
	}
	// without --cors-origin no CORS header at all
	q := newPrincipalAPI(t, api.Config{})
	if _, h, _ := q.do(readSecret, "GET", "/api/v1/actions", "", "Origin", "https://dash.example.com"); h.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("no CORS configured, yet %v", h)
	}
	for _, o := range []string{"*", "http://localhost:3000", "https://a.example"} {
		if err := api.ValidateCORSOrigin(o); err != nil {
			t.Errorf("%q: %v", o, err)
		}
	}
	for _, o := range []string{"", "a.example", "https://a.example/", "ftp://a.example", "https://a.example/x", "https://u@a.example"} {
		if err := api.ValidateCORSOrigin(o); err == nil {
			t.Errorf("%q accepted", o)
		}
	}
}
