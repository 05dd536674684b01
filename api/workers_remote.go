package api

// Workers over HTTP (API.md): register with a token of role worker (or
// admin), then poll, report, heartbeat and drain with the session the
// registration returned. The server writes the worker's events on its
// behalf through services/remote, fenced as an in-process worker's are.

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/remote"
)

// RoleSession is not a token's role: it marks the routes a worker session
// reaches (its own bearer secret, checked by the route against the session
// the registration returned, whatever tokens are configured).
const RoleSession Role = "session"

var (
	workerRegistrars = []Role{RoleAdmin, RoleWorker}
	sessionRoute     = []Role{RoleSession}
	// sessionScope: a session is no token; it was registered by an unscoped one
	sessionScope = noScope("a worker session's route: the session, not a token, is checked, and only an unscoped token registers one")
)

// IsSessionRoute reports whether a route takes a worker session, not a token.
func (rt Route) IsSessionRoute() bool { return len(rt.Roles) == 1 && rt.Roles[0] == RoleSession }

func (s *Server) remoteRoutes() []Route {
	return []Route{
		// a worker is handed executions of every action its runners serve
		{"registerWorker", "POST", "/api/v1/workers/register", workerRegistrars, allActions, s.registerWorker},
		{"pollWorker", "POST", "/api/v1/workers/{name}/poll", sessionRoute, sessionScope, s.pollWorker},
		{"reportWorker", "POST", "/api/v1/workers/{name}/report", sessionRoute, sessionScope, s.reportWorker},
		{"heartbeatWorker", "POST", "/api/v1/workers/{name}/heartbeat", sessionRoute, sessionScope, s.heartbeatWorker},
		{"drainWorker", "POST", "/api/v1/workers/{name}/drain", sessionRoute, sessionScope, s.drainWorker},
	}
}

// remoteOff answers when this server serves no remote workers.
func remoteOff() *Problem {
	return typed(typeUnavailable, http.StatusServiceUnavailable, "this server does not serve remote workers")
}

func (s *Server) registerWorker(w http.ResponseWriter, r *http.Request) {
	var req wire.WorkerRegister
	if p := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req, false); p != nil {
		writeProblem(w, p)
		return
	}
	if s.cfg.Remote == nil {
		writeProblem(w, remoteOff())
		return
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	by := ""
	if who := principalOf(r); who != nil {
		by = who.Name
	}
	out, err := s.cfg.Remote.Register(r.Context(), remote.Registration{Name: req.Name, Runners: req.Runners, Slots: req.Slots, By: by}, host)
	if err != nil {
		s.failRemote(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, wire.WorkerSession(out))
}

// session authenticates the request's worker session for the route's name.
func (s *Server) session(w http.ResponseWriter, r *http.Request) (remote.Session, bool) {
	scheme, secret, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		writeProblem(w, typed(typeUnauthorized, http.StatusUnauthorized, "this route needs the worker session the registration returned (Authorization: Bearer <session>)"))
		return remote.Session{}, false
	}
	if s.cfg.Remote == nil {
		writeProblem(w, remoteOff())
		return remote.Session{}, false
	}
	x, err := s.cfg.Remote.Authenticate(mux.Vars(r)["name"], strings.TrimSpace(secret))
	if err != nil {
		s.failRemote(w, r, err)
		return remote.Session{}, false
	}
	return x, true
}

func (s *Server) pollWorker(w http.ResponseWriter, r *http.Request) {
	x, ok := s.session(w, r)
	if !ok {
		return
	}
	req := wire.WorkerPoll{Max: -1, WaitSeconds: 20} // max omitted: the incarnation's slots
	if p := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req, true); p != nil {
		writeProblem(w, p)
		return
	}
	if req.Max < -1 || req.Max > 100_000 || req.WaitSeconds < 0 || req.WaitSeconds > remote.MaxWait.Seconds() || req.WaitSeconds != req.WaitSeconds {
		writeProblem(w, typed(typeInvalid, http.StatusBadRequest, "max must be 0..100000 (omitted: the incarnation's slots) and wait_seconds 0..%g", remote.MaxWait.Seconds()))
		return
	}
	poll := s.cfg.Remote.Poll
	if req.Start {
		poll = s.cfg.Remote.PollStart
	}
	out, err := poll(r.Context(), x, req.Max, time.Duration(req.WaitSeconds*float64(time.Second)))
	if err != nil {
		s.failRemote(w, r, err)
		return
	}
	res := wire.WorkerPollResult{Assignments: make([]wire.Assignment, len(out.Assignments)), Cancels: out.Cancels}
	for i, a := range out.Assignments {
		res.Assignments[i] = wire.Assignment(a)
	}
	writeJSON(w, http.StatusOK, res)
}

// reportBody is a single report or a batch: exactly one of the two shapes.
type reportBody struct {
	wire.WorkerReport
	Reports []wire.WorkerReport `json:"reports"`
}

// maxReports bounds a batch.
const maxReports = 1000

func (s *Server) reportWorker(w http.ResponseWriter, r *http.Request) {
	x, ok := s.session(w, r)
	if !ok {
		return
	}
	var body reportBody
	if p := decodeJSON(w, r, s.cfg.MaxBodyBytes, &body, false); p != nil {
		writeProblem(w, p)
		return
	}
	single := body.Reports == nil
	if !single && (body.Execution != "" || body.Status != "" || body.Result != nil || body.Error != "" || body.Attempt != 0) {
		writeProblem(w, typed(typeInvalid, http.StatusBadRequest, "send one report or {\"reports\":[…]}, not both"))
		return
	}
	if single {
		out, err := s.cfg.Remote.Report(r.Context(), x, remote.Report(body.WorkerReport))
		if err != nil {
			s.failRemote(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, wire.WorkerReportResult{Execution: out.Execution, Status: out.Status})
		return
	}
	if len(body.Reports) == 0 || len(body.Reports) > maxReports {
		writeProblem(w, typed(typeInvalid, http.StatusBadRequest, "reports must hold 1..%d reports", maxReports))
		return
	}
	for _, rep := range body.Reports { // a malformed one refuses the whole batch before anything is written
		if err := remote.CheckReport(remote.Report(rep)); err != nil {
			s.failRemote(w, r, err)
			return
		}
	}
	res, fatal := s.reportBatch(r, x, body.Reports)
	if fatal != nil {
		writeProblem(w, fatal) // the session ended, or the log failed: send the batch again (a report is idempotent)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) heartbeatWorker(w http.ResponseWriter, r *http.Request) {
	x, ok := s.session(w, r)
	if !ok {
		return
	}
	if p := decodeJSON(w, r, s.cfg.MaxBodyBytes, &struct{}{}, true); p != nil {
		writeProblem(w, p)
		return
	}
	if err := s.cfg.Remote.Heartbeat(r.Context(), x); err != nil {
		s.failRemote(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) drainWorker(w http.ResponseWriter, r *http.Request) {
	x, ok := s.session(w, r)
	if !ok {
		return
	}
	if p := decodeJSON(w, r, s.cfg.MaxBodyBytes, &struct{}{}, true); p != nil {
		writeProblem(w, p)
		return
	}
	if err := s.cfg.Remote.Drain(r.Context(), x); err != nil {
		s.failRemote(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"name": x.Name(), "incarnation": x.Incarnation(), "status": "draining"})
}

func (s *Server) failRemote(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return // the worker went away
	}
	writeProblem(w, s.remoteProblem(r, err))
}

// remoteProblem maps an error of services/remote to a problem.
func (s *Server) remoteProblem(r *http.Request, err error) *Problem {
	switch {
	case errors.Is(err, remote.ErrNoSession), errors.Is(err, remote.ErrEnded):
		return typed(typeUnauthorized, http.StatusUnauthorized, "%v", err)
	case errors.Is(err, remote.ErrOtherName):
		return typed(typeForbidden, http.StatusForbidden, "%v", err)
	case errors.Is(err, remote.ErrNotHanded), errors.Is(err, domain.ErrWorkerReplaced), errors.Is(err, domain.ErrWorkerNotRegistered):
		return typed(typeConflict, http.StatusConflict, "%v", err)
	case errors.Is(err, remote.ErrUnavailable):
		return typed(typeUnavailable, http.StatusServiceUnavailable, "%v", err)
	case errors.Is(err, domain.ErrIncarnationReused), errors.Is(err, remote.ErrNameTaken):
		return typed(typeConflict, http.StatusConflict, "%v", err)
	case errors.Is(err, remote.ErrTooManyNames):
		return typed(typeTooManyWorkers, http.StatusTooManyRequests, "%v", err)
	}
	if p := asProblem(err); p != nil {
		return p
	}
	s.log.Error("worker request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	return typed(typeInternal, http.StatusInternalServerError, "internal error; the server log has the cause")
}
