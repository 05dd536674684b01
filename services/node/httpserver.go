// An HTTP server in the shape of every long-running part
// (internal/startstop): the API's and the health endpoints'.

package node

import (
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
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return err
	}
	// Requests' contexts outlive Start's ctx: Stop ends them.
	base, cancel := context.WithCancel(context.Background())
	s.ln, s.cancel, s.done = ln, cancel, make(chan struct{})
	s.hs = &http.Server{Handler: s.Handler, ReadHeaderTimeout: s.ReadHeaderTimeout, IdleTimeout: s.IdleTimeout,
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
	if s == nil || s.hs == nil {
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
