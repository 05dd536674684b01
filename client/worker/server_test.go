package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/node"
	"github.com/turnstile/turnstile/services/remote"
)

// server is a real turnstile server over HTTP: the executor (no in-process
// worker), the read model, the worker protocol and the API, on a memstore.
type server struct {
	URL   string
	Store *memstore.Store
	stop  func()
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// startServer starts a server whose executor judges worker leases by lease.
func startServer(lease time.Duration) (*server, error) {
	ctx, cancel := context.WithCancel(context.Background())
	store := memstore.New(memstore.Options{})
	n, err := node.Start(ctx, store, node.Config{WorkerLease: lease, Logger: quiet})
	if err != nil {
		cancel()
		return nil, err
	}
	views := projections.NewViews()
	done := make(chan error, 1)
	go func() { done <- views.Run(ctx, store) }()
	rs, err := remote.New(remote.Config{Store: store, Lease: lease, Logger: quiet})
	if err != nil {
		cancel()
		return nil, err
	}
	if err := rs.Start(ctx); err != nil {
		cancel()
		return nil, err
	}
	<-rs.Started()
	srv := api.New(api.Config{Commands: n.Commands, Queries: projections.NewQueries(views, store), Remote: rs, Logger: quiet})
	hs := httptest.NewServer(srv.Handler())
	return &server{URL: hs.URL, Store: store, stop: func() {
		hs.CloseClientConnections()
		hs.Close()
		rs.Stop()
		n.Stop()
		cancel()
		<-done
		_ = store.Close()
	}}, nil
}

// do sends a JSON request and decodes the answer into out (if not nil).
func do(method, url, body string, out any) (int, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, err
		}
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, raw)
	}
	return resp.StatusCode, nil
}

type execution struct {
	ID     string          `json:"id"`
	Status string          `json:"status"`
	Worker string          `json:"worker"`
	Result json.RawMessage `json:"result"`
	Error  string          `json:"error"`
}

// waitEnd polls an execution until it ends or d passes.
func (s *server) waitEnd(id string, d time.Duration) (execution, error) {
	deadline := time.Now().Add(d)
	for {
		var x execution
		if _, err := do("GET", s.URL+"/api/v1/executions/"+id, "", &x); err != nil {
			return x, err
		}
		switch x.Status {
		case "completed", "failed", "timed_out", "cancelled", "rejected":
			return x, nil
		}
		if time.Now().After(deadline) {
			return x, fmt.Errorf("execution %s still %s after %s", id, x.Status, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// request requests an execution of action with input and returns its id.
func (s *server) request(action, input string) (string, error) {
	var out struct {
		ID string `json:"id"`
	}
	_, err := do("POST", s.URL+"/api/v1/executions", `{"action":"`+action+`","input":`+input+`}`, &out)
	return out.ID, err
}
