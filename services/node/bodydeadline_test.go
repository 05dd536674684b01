package node_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/services/node"
)

// TestBodyTimeout: a client that sends its body slower than BodyTimeout
// gets 408 and loses its connection; a body sent in time reaches the
// handler whole, and the handler may then take longer than BodyTimeout
// (a long poll) without its request being cut.
func TestBodyTimeout(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		select { // longer than the body deadline
		case <-time.After(600 * time.Millisecond):
		case <-r.Context().Done():
			http.Error(w, "cut", 500)
			return
		}
		_, _ = w.Write(b)
	})
	s := &node.HTTPServer{Addr: "127.0.0.1:0", Handler: mux, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), BodyTimeout: 300 * time.Millisecond}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()

	resp, err := http.Post("http://"+s.ListenAddr()+"/echo", "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "hello" {
		t.Errorf("a body in time: %d %q", resp.StatusCode, b)
	}

	conn, err := net.Dial("tcp", s.ListenAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nslow")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	t0 := time.Now()
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("a slow body: no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || time.Since(t0) > 5*time.Second {
		t.Errorf("a slow body: %d after %v, want 408 soon after the body deadline", resp.StatusCode, time.Since(t0))
	}
}
