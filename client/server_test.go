package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/node"
)

// The tokens of the test servers.
const (
	adminToken  = "admin-token-0123456789"
	readerToken = "reader-token-0123456789"
)

// serverURL is the server the examples talk to (started by TestMain).
var serverURL string

func TestMain(m *testing.M) {
	url, stop, err := startServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	serverURL = url
	code := m.Run()
	stop()
	os.Exit(code)
}

// startServer runs a whole turnstile in this process: a memory store, the
// executor and two in-process workers, the read model following the log,
// and the API, with an admin and a reader token, on a real HTTP listener.
func startServer() (url string, stop func(), err error) { return startServerWith(2) }

// startServerWith is startServer with that many in-process workers.
func startServerWith(workers int) (url string, stop func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	store := memstore.New(memstore.Options{})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := node.Start(ctx, store, node.Config{Workers: workers, Slots: 8, Logger: log})
	if err != nil {
		cancel()
		return "", nil, err
	}
	tokens, err := api.ParseTokens([]string{"admin:" + adminToken, "reader:" + readerToken})
	if err != nil {
		cancel()
		return "", nil, err
	}
	views := projections.NewViews()
	done := make(chan error, 1)
	go func() { done <- views.Run(ctx, store) }()
	srv := api.New(api.Config{Commands: n.Commands, Queries: projections.NewQueries(views, store), Tokens: tokens,
		Logger: log, FeedHeartbeat: 50 * time.Millisecond, Version: "test"})
	hs := httptest.NewServer(srv.Handler())
	return hs.URL, func() {
		hs.CloseClientConnections()
		hs.Close()
		cancel()
		<-done
		n.Stop()
		_ = store.Close()
	}, nil
}

// newServer is startServer for one test.
func newServer(t *testing.T) string {
	t.Helper()
	url, stop, err := startServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}
