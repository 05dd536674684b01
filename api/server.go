// Package api is turnstile's HTTP API (gorilla/mux): commands, queries,
// audit replay, live feeds (Server-Sent Events), auth, Prometheus metrics
// and an OpenAPI document. The contract is API.md. Every error is an
// application/problem+json document; no input can make a handler panic
// (a recoverer turns one into a 500 and logs it).
package api

import (
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnstile/turnstile/api/ui"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/remote"
)

// Config is what the API serves from.
type Config struct {
	// Commands is the command side. Without Views of its own it is given
	// the Queries' (command.Service.WithViews): they let it refuse early
	// what the log would refuse anyway.
	Commands *command.Service
	Queries  *projections.Queries // the read side, over the views their owner folds (see Views.Run)
	Tokens   *Tokens              // nil or empty: anonymous
	Remote   *remote.Service      // the worker protocol's server side; nil: the worker routes answer 503
	Archive  ArchiveStatus        // the archive's segments, for GET /api/v1/log; nil: none
	Logger   *slog.Logger         // nil: slog.Default()
	Registry *prometheus.Registry // nil: a new one
	// Ready, if set, must also hold for /readyz (e.g. the executor caught up).
	Ready func() bool

	// CORSOrigins are the origins (scheme://host[:port], or "*") whose
	// browser pages may call the API and open its feeds; none: no CORS
	// headers, so browsers allow same-origin pages only.
	CORSOrigins []string

	MaxBodyBytes  int64         // default 1 MiB
	FeedHeartbeat time.Duration // SSE comment interval; default 15s
	// MaxFeeds bounds the feeds open at once (default 1000), and
	// MaxFeedsPerToken those of one token, or of one client address
	// without a token (default 100); a feed past either gets 429.
	MaxFeeds, MaxFeedsPerToken int
	// FeedStallTimeout is how long a feed client may go without reading
	// before it is cut (default 30s); it resumes with Last-Event-ID.
	FeedStallTimeout time.Duration
	Version          string
}

// Server is the HTTP API. Handler returns its http.Handler.
type Server struct {
	cfg     Config
	router  *mux.Router
	routes  []Route
	metrics *metrics
	log     *slog.Logger

	caughtUpOnce atomic.Bool   // the views reached the head once
	auditing     chan struct{} // one GET /audit at a time
	feeds        feedLimiter
}

// maxReadyLag is how many events the views may be behind the head and still
// be ready, once they have caught up.
const maxReadyLag = 10_000

// Route describes one route: for the router, auth, docs and tests.
type Route struct {
	Name   string
	Method string
	Path   string // gorilla/mux template
	Roles  []Role // nil: public
	// Scope is how a scoped token is limited on the route (scope.go); every
	// route declares one.
	Scope   ScopeRule
	handler http.HandlerFunc
}

// New builds the server.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.FeedHeartbeat <= 0 {
		cfg.FeedHeartbeat = 15 * time.Second
	}
	if cfg.MaxFeeds <= 0 {
		cfg.MaxFeeds = defaultMaxFeeds
	}
	if cfg.MaxFeedsPerToken <= 0 {
		cfg.MaxFeedsPerToken = defaultMaxFeedsPerToken
	}
	if cfg.FeedStallTimeout <= 0 {
		cfg.FeedStallTimeout = feedWriteTimeout
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Commands.Views == nil {
		cfg.Commands = cfg.Commands.WithViews(cfg.Queries.Views())
	}
	// SkipClean: an unclean path (/a/../b, //) gets a problem document from
	// the router, not gorilla/mux's bare redirect.
	s := &Server{cfg: cfg, router: mux.NewRouter().SkipClean(true), log: cfg.Logger, auditing: make(chan struct{}, 1),
		feeds: feedLimiter{max: cfg.MaxFeeds, perHolder: cfg.MaxFeedsPerToken}}
	s.metrics = newMetrics(cfg.Registry, cfg.Queries)
	s.routes = s.routeTable()
	for _, rt := range s.routes {
		s.router.Handle(rt.Path, s.wrap(rt)).Methods(rt.Method).Name(rt.Name)
	}
	s.router.PathPrefix(ui.Prefix).Handler(ui.Handler()) // the dashboard
	s.router.Handle("/", ui.Redirect()).Methods("GET", "HEAD")
	s.router.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, typed(typeNotFound, http.StatusNotFound, "no route for %s %s", r.Method, clip(r.URL.Path)))
	})
	s.router.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, problemf(http.StatusMethodNotAllowed, "%s is not allowed on %s", r.Method, clip(r.URL.Path)))
	})
	return s
}

// Handler returns the API's handler: CORS when Config.CORSOrigins names
// origins, and the browser guards (guard.go) before every route.
func (s *Server) Handler() http.Handler { return s.cors(s.guard(s.router)) }

// Routes returns the route table.
func (s *Server) Routes() []Route { return append([]Route(nil), s.routes...) }

func (s *Server) routeTable() []Route {
	return append([]Route{
		{"createAction", "POST", "/api/v1/actions", adminOnly, byBody, s.createAction},
		{"listActions", "GET", "/api/v1/actions", everyone, filtered, s.listActions},
		{"getAction", "GET", "/api/v1/actions/{ref}", everyone, byRef, s.getAction},
		{"pauseAction", "POST", "/api/v1/actions/{ref}/pause", adminOnly, byRef, s.pauseAction},
		{"resumeAction", "POST", "/api/v1/actions/{ref}/resume", adminOnly, byRef, s.resumeAction},
		{"changePolicy", "PUT", "/api/v1/actions/{ref}/policy", adminOnly, byRef, s.changePolicy},
		{"actionQueueStats", "GET", "/api/v1/actions/{ref}/queue-stats", readers, byRef, s.actionQueueStats},
		{"actionQueue", "GET", "/api/v1/actions/{ref}/queue", readers, byRef, s.actionQueue},
		{"allQueueStats", "GET", "/api/v1/queue-stats", readers, filtered, s.allQueueStats},
		{"requestExecution", "POST", "/api/v1/executions", clients, byBody, s.requestExecution},
		{"listExecutions", "GET", "/api/v1/executions", readers, filtered, s.listExecutions},
		{"getExecution", "GET", "/api/v1/executions/{id}", everyone, byExecution, s.getExecution},
		{"cancelExecution", "POST", "/api/v1/executions/{id}/cancel", clients, byExecution, s.cancelExecution},
		{"executionEvents", "GET", "/api/v1/executions/{id}/events", everyone, byExecution, s.executionEvents},
		{"explainExecution", "GET", "/api/v1/executions/{id}/explain", everyone, byExecution, s.explainExecution},
		{"events", "GET", "/api/v1/events", readers, allActions, s.events},
		{"stream", "GET", "/api/v1/streams/{stream}", readers, byStream, s.stream},
		{"feedQueueStats", "GET", "/api/v1/feeds/queue-stats", readers, byFeed, s.feedQueueStats},
		{"feedExecutions", "GET", "/api/v1/feeds/executions", readers, byFeed, s.feedExecutions},
		{"feedEvents", "GET", "/api/v1/feeds/events", readers, byFeed, s.feedEvents},
		{"createFeedTicket", "POST", "/api/v1/feeds/ticket", readers, noScope("the ticket carries the token's scope, and the feeds apply it"), s.feedTicket},
		// workers: each lists the executions it runs, of any action
		{"workers", "GET", "/api/v1/workers", everyone, allActions, s.workers},
		{"actionWaiters", "GET", "/api/v1/actions/{ref}/waiters", readers, byRef, s.waiters},
		{"whoami", "GET", "/api/v1/whoami", everyone, noScope("it answers the caller's own role and name"), s.whoami},
		{"audit", "GET", "/api/v1/audit", auditors, allActions, s.audit},
		{"rebuild", "POST", "/api/v1/admin/rebuild", adminOnly, allActions, s.rebuild},
		{"openapi", "GET", "/api/v1/openapi.json", publicRoute, noScope("public: the API's description"), s.openapi},
		{"healthz", "GET", "/healthz", publicRoute, noScope("public: the process's liveness"), s.healthz},
		{"readyz", "GET", "/readyz", publicRoute, noScope("public: the read model's lag, no action's data"), s.readyz},
		// metrics: every action's figures, labelled by ref
		{"metrics", "GET", "/metrics", readers, allActions, s.metricsHandler},
	}, append(append(append(s.remoteRoutes(), s.scheduleRoutes()...), s.resourceRoutes()...), s.logRoutes()...)...)
}

// wrap adds auth, the route's scope rule, metrics, panic recovery and security headers to a route.
func (s *Server) wrap(rt Route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("handler panic", "route", rt.Name, "panic", v, "stack", string(debug.Stack()))
				if !rec.wrote {
					writeProblem(rec, typed(typeInternal, http.StatusInternalServerError, "internal error"))
				}
			}
			s.metrics.observe(rt.Name, r.Method, rec.status, time.Since(start))
		}()
		ticketOK := rt.Method == http.MethodGet && strings.HasPrefix(rt.Path, "/api/v1/feeds/")
		who, p := s.cfg.Tokens.authorize(r, rt.Roles, ticketOK)
		if p != nil {
			writeProblem(rec, p)
			return
		}
		if ticketOK {
			dropTicket(r)
		}
		r = r.WithContext(withPrincipal(r.Context(), who))
		if p := s.inScope(r, rt); p != nil {
			writeProblem(rec, p)
			return
		}
		rt.handler(rec, r)
	})
}

// fail writes err as a problem; unexpected errors are logged and hidden,
// and so is a part of the log that does not verify, for the operator.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if p := asProblem(err); p != nil {
		if p.Type == typeCorrupt {
			s.log.Error("a read needs a part of the log that does not verify: nothing of it is served (turnstile verify --archive names the damage)",
				"method", r.Method, "path", r.URL.Path, "err", err)
		}
		writeProblem(w, p)
		return
	}
	if r.Context().Err() != nil {
		// The client went away, or the server is stopping: either way the
		// answer is a problem, never an empty 200 (a client that left
		// does not read it).
		writeProblem(w, typed(typeUnavailable, http.StatusServiceUnavailable, "the request was cut short (the server is stopping, or the client went away): %v", err))
		return
	}
	s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	writeProblem(w, typed(typeInternal, http.StatusInternalServerError, "internal error; the server log has the cause"))
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

// Flush lets SSE handlers flush through the recorder.
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		r.wrote = true
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": s.cfg.Version})
}

// readyz is 200 when the views have caught up with the log (and Ready holds).
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	next, head, lag, err := s.cfg.Queries.Lag(r.Context())
	if err != nil {
		writeProblem(w, typed(typeUnavailable, http.StatusServiceUnavailable, "the log is not readable: %v", err))
		return
	}
	body := map[string]any{"position": next, "head": head, "lag": lag}
	if s.cfg.Ready != nil && !s.cfg.Ready() {
		body["status"] = "starting"
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	// Ready once the views reached the head (the start-up catch-up), and
	// from then on while they stay close to it: a busy log is never exactly
	// caught up.
	if lag == 0 {
		s.caughtUpOnce.Store(true)
	}
	if lag > 0 && (!s.caughtUpOnce.Load() || lag > maxReadyLag) {
		body["status"] = "catching up"
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	body["status"] = "ready"
	writeJSON(w, http.StatusOK, body)
}
