package main

import (
	"net/http"
	"strings"
	"testing"
)

// serve's feed bounds are flags: with --max-feeds-per-token 1 a second feed
// of the same client is refused with 429 while the first stays open, and
// bad values are refused before anything starts.
func TestServeFeedFlags(t *testing.T) {
	t.Parallel()
	bin := turnstileBinary(t)
	srv := startServe(t, bin, t.TempDir(), "--max-feeds", "5", "--max-feeds-per-token", "1")

	first, err := http.Get(srv.url + "/api/v1/feeds/events?from=0")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Body.Close()
	if first.StatusCode != http.StatusOK {
		t.Fatalf("first feed: %s", first.Status)
	}
	second, err := http.Get(srv.url + "/api/v1/feeds/events?from=0")
	if err != nil {
		t.Fatal(err)
	}
	second.Body.Close()
	if second.StatusCode != http.StatusTooManyRequests || second.Header.Get("Retry-After") == "" {
		t.Fatalf("second feed of one client with --max-feeds-per-token 1: %s, Retry-After %q; want 429 with Retry-After", second.Status, second.Header.Get("Retry-After"))
	}

	for _, bad := range [][]string{
		{"--max-feeds", "0"},
		{"--max-feeds", "2", "--max-feeds-per-token", "3"},
		{"--feed-stall-timeout", "10ms"},
	} {
		code, _, errOut := runCLI(t.Context(), t, bin, nil, append([]string{"serve", "--data", t.TempDir(), "--addr", "127.0.0.1:0"}, bad...)...)
		if flagName := bad[len(bad)-2]; code != 2 || !strings.Contains(errOut, flagName) {
			t.Errorf("serve %v: exit %d, stderr %q; want exit 2 naming %s", bad, code, errOut, flagName)
		}
	}
}
