// The health endpoints of a process without the API (turnstile executor
// and worker): /healthz and /readyz for orchestrators.

package node

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// NewHealthServer returns a server of GET /healthz (200 while the process
// runs) and GET /readyz (200 when ready says so, 503 otherwise; both with
// ready's details as JSON) on addr. It logs its address once it listens.
func NewHealthServer(addr string, log *slog.Logger, ready func() (bool, any)) *HTTPServer {
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, ok bool, details any) {
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": ok, "details": details})
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, details := ready()
		answer(w, true, details)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, details := ready()
		answer(w, ok, details)
	})
	return &HTTPServer{Addr: addr, Handler: mux, Logger: log, ReadHeaderTimeout: 5 * time.Second, StopTimeout: 2 * time.Second}
}

// StartHealth starts a health server (NewHealthServer) on addr, if addr is
// not empty, and logs its address. Stop the server returned; it is nil, and
// Stop does nothing, when addr is empty.
func StartHealth(addr string, log *slog.Logger, ready func() (bool, any)) (*HTTPServer, error) {
	if addr == "" {
		return nil, nil
	}
	h := NewHealthServer(addr, log, ready)
	if err := h.Start(context.Background()); err != nil {
		return nil, fmt.Errorf("health address: %w", err)
	}
	log.Info("health endpoints", "addr", h.ListenAddr())
	return h, nil
}
