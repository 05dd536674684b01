// An HTTP server in the shape of every long-running part
// (internal/startstop): the API's and the health endpoints'.

package node

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/turnstile/turnstile/internal/startstop"
)

// HTTPServer serves Handler on Addr from Start until Stop.
type HTTPServer struct {
	Addr    string
	Handler http.Handler
	Logger  *slog.Logger
	// ReadHeaderTimeout and IdleTimeout are http.Server's (0: none).
	ReadHeaderTimeout, IdleTimeout time.Duration
	// StopTimeout bounds how long Stop waits for requests under way
	// (default 10s); their contexts are cancelled at once.
	StopTimeout time.Duration
	// BodyTimeout bounds how long a request's body may take to arrive
	// (0: no bound): a client that sends it slower gets 408 and its
	// connection is closed. Bodies up to BodyBuffer bytes are read before
	// the handler runs; a larger one must be read by the handler within
	// BodyTimeout from the request's start.
	BodyTimeout time.Duration
	BodyBuffer  int64 // default 1 MiB + 1 byte

	ln       net.Listener
	hs       *http.Server
	cancel   context.CancelFunc
	done     chan struct{}
	started  startstop.Signal
	stopOnce sync.Once
	err      error
}

var _ interface {
	startstop.Service
	startstop.Ender
} = (*HTTPServer)(nil)

// Start listens on Addr and serves in the background.
func (s *HTTPServer) Start(context.Context) error {
	if s.hs != nil {
		return startstop.ErrStarted
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.StopTimeout <= 0 {
		s.StopTimeout = 10 * time.Second
	}
	if s.ln == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	ln := s.ln
	handler := s.Handler
	if s.BodyTimeout > 0 {
		handler = bodyDeadline(handler, s.BodyTimeout, cmp.Or(s.BodyBuffer, 1<<20+1))
	}
	// Requests' contexts outlive Start's ctx: Stop ends them.
	base, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	s.hs = &http.Server{Handler: handler, ReadHeaderTimeout: s.ReadHeaderTimeout, IdleTimeout: s.IdleTimeout,
		BaseContext: func(net.Listener) context.Context { return base }, ErrorLog: slog.NewLogLogger(s.Logger.Handler(), slog.LevelWarn)}
	go func() {
		err := s.hs.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.err = err
		close(s.done)
	}()
	s.started.Close()
	return nil
}

// Listen binds Addr without serving yet (connections wait in the
// backlog until Start): a process binds every listener before any of its
// parts acts, so a taken port stops it before it has done anything.
// Start calls it if it was not called.
func (s *HTTPServer) Listen() error {
	if s.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return err
	}
	s.ln = ln
	return nil
}

// ListenAddr is the address the server listens on (Addr with its port
// resolved); "" before Start.
func (s *HTTPServer) ListenAddr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Started is closed once the server listens.
func (s *HTTPServer) Started() <-chan struct{} { return s.started.C() }

// Done is closed once the server has stopped serving: after Stop, or when
// serving failed (Err).
func (s *HTTPServer) Done() <-chan struct{} { return s.done }

// Err is why the server stopped serving by itself; nil while it serves and
// after a Stop.
func (s *HTTPServer) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// Stop ends the requests under way (their contexts, such as feeds), shuts
// the server down within StopTimeout and returns once it has stopped.
func (s *HTTPServer) Stop() {
	if s == nil {
		return
	}
	if s.hs == nil {
		if s.ln != nil {
			_ = s.ln.Close() // bound, never served
		}
		return
	}
	s.stopOnce.Do(func() {
		s.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), s.StopTimeout)
		defer cancel()
		if err := s.hs.Shutdown(ctx); err != nil {
			s.Logger.Warn("http shutdown", "err", err)
		}
	})
}
