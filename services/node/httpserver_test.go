package node_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/turnstile/turnstile/internal/startstop"
	"github.com/turnstile/turnstile/services/node"
)

// TestHealthServerLifecycle: the health server listens once Started is
// closed, answers /healthz 200 and /readyz after ready, and after Stop its
// Done is closed with no error and it no longer answers.
func TestHealthServerLifecycle(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var ready atomic.Bool
	h := node.NewHealthServer("127.0.0.1:0", log, func() (bool, any) { return ready.Load(), "details" })
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := startstop.WaitAllStarted(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	get := func(path string) int {
		t.Helper()
		resp, err := http.Get("http://" + h.ListenAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if c := get("/healthz"); c != http.StatusOK {
		t.Errorf("/healthz: %d, want 200", c)
	}
	if c := get("/readyz"); c != http.StatusServiceUnavailable {
		t.Errorf("/readyz before ready: %d, want 503", c)
	}
	ready.Store(true)
	if c := get("/readyz"); c != http.StatusOK {
		t.Errorf("/readyz once ready: %d, want 200", c)
	}
	addr := h.ListenAddr()
	startstop.StopAllParallel(h)
	<-h.Done()
	if err := h.Err(); err != nil {
		t.Errorf("Err after Stop: %v, want nil", err)
	}
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		_ = resp.Body.Close()
		t.Error("the server still answers after Stop")
	}
	h.Stop() // again: harmless
}

// TestStartHealthWithoutAddress: no address, no server, and stopping the
// nil server does nothing.
func TestStartHealthWithoutAddress(t *testing.T) {
	t.Parallel()
	h, err := node.StartHealth("", slog.New(slog.DiscardHandler), nil)
	if err != nil || h != nil {
		t.Fatalf("StartHealth(\"\"): %v, %v; want nil, nil", h, err)
	}
	h.Stop()
}

// TestLocate: store URLs resolve to their backend; bad ones are
// configuration errors.
func TestLocate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url, data, kind string
		bad             bool
	}{
		{url: "", data: "", bad: true},
		{url: "", data: "some/dir", kind: "embedded"},
		{url: "embedded:///tmp/x", kind: "embedded"},
		{url: "embedded://", bad: true},
		{url: "memory://", kind: "memory"},
		{url: "postgres://u:p@h/db", kind: "postgres"},
		{url: "esdb://a:2113,b:2113", kind: "kurrentdb"},
		{url: "ftp://x", bad: true},
	} {
		kind, where, err := node.Locate(tc.url, tc.data)
		var ce node.ConfigError
		switch {
		case tc.bad && !errors.As(err, &ce):
			t.Errorf("Locate(%q, %q): %v, want a ConfigError", tc.url, tc.data, err)
		case !tc.bad && (err != nil || kind != tc.kind):
			t.Errorf("Locate(%q, %q) = %q, %q, %v; want kind %q", tc.url, tc.data, kind, where, err, tc.kind)
		}
	}
	if _, where, _ := node.Locate("postgres://u:secret@h/db", ""); where != "postgres://u:xxxxx@h/db" {
		t.Errorf("a postgres location keeps its password: %q", where)
	}
}
