package api

import (
	"errors"
	"go.opentelemetry.io/otel/attribute"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
)

// requestExecution appends execution.requested and answers 202. The same
// Idempotency-Key with the same body answers the same id (with the header
// Idempotent-Replayed: true); with another body, 409. A request the
// command side refuses early (its queue would refuse it) is a 429, with
// Retry-After when the rate limit refused it.
func (s *Server) requestExecution(w http.ResponseWriter, r *http.Request) {
	var body wire.ExecutionRequest
	if p := decodeJSON(w, r, s.cfg.MaxBodyBytes, &body, false); p != nil {
		writeProblem(w, p)
		return
	}
	if p := mayWrite(r, body.Action); p != nil {
		writeProblem(w, p)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key != "" {
		if p := checkToken("Idempotency-Key", key, maxIdemKeyLen); p != nil {
			writeProblem(w, p)
			return
		}
	}
	req := command.Request{
		Action: body.Action, Input: body.Input, IdempotencyKey: key,
		WithItems: body.WithItems, Concurrency: body.Concurrency, Priority: body.Priority,
	}
	if p := requestTiming(&req, body); p != nil {
		writeProblem(w, p)
		return
	}
	ctx, span, tp := requestSpan(r)
	defer span.End()
	req.Traceparent = tp
	a, err := s.cfg.Commands.Submit(ctx, req, time.Now())
	if err != nil {
		span.RecordError(err)
		var refused *command.RefusedError
		if errors.As(err, &refused) && refused.Code == domain.RejectRateLimited {
			w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(max(refused.RetryAfter.Seconds(), 1))), 10))
		}
		s.fail(w, r, err)
		return
	}
	span.SetAttributes(attribute.String("turnstile.execution", a.ID))
	w.Header().Set("Location", "/api/v1/executions/"+a.ID)
	if !a.Created {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusAccepted, wire.Accepted{ID: a.ID, Status: string(a.Status)})
}

func idParam(r *http.Request) (string, *Problem) {
	id := mux.Vars(r)["id"]
	return id, checkToken("execution id", id, maxIDLen)
}

// getExecution answers an execution's current state, or with ?as_of= its
// state then, folded from its stream.
func (s *Server) getExecution(w http.ResponseWriter, r *http.Request) {
	id, p := idParam(r)
	if p == nil {
		p = queryOnly(r, "as_of")
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	var (
		v     projections.ExecutionView
		found bool
		err   error
	)
	asOf := r.URL.Query().Get("as_of")
	if asOf != "" {
		v, found, err = s.cfg.Queries.ExecutionAt(r.Context(), id, asOf)
	} else {
		v, found, err = s.cfg.Queries.Execution(r.Context(), id)
	}
	switch {
	case err != nil:
		s.fail(w, r, err)
	case !found && asOf != "":
		writeProblem(w, typed(typeNotFound, http.StatusNotFound, "execution %q did not exist as of %s", id, clip(asOf)))
	case !found:
		writeProblem(w, typed(typeNotFound, http.StatusNotFound, "no execution %q", id))
	default:
		writeJSON(w, http.StatusOK, executionOut(v))
	}
}

// listExecutions pages through executions, newest first.
func (s *Server) listExecutions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := queryOnly(r, "action", "status", "parent", "limit", "after")
	f := projections.ListFilter{Action: q.Get("action"), Status: domain.Status(q.Get("status")), Parent: q.Get("parent"), After: q.Get("after")}
	if who := principalOf(r); who.Scoped() {
		f.ActionPrefixes = who.Scope
	}
	if p == nil {
		f.Limit, p = queryLimit(r, defaultPageLimit)
	}
	if p == nil && f.Status != "" && !f.Status.Valid() {
		p = typed(typeInvalid, http.StatusBadRequest, "status %q is not one of %s", clip(string(f.Status)), strings.Join(statusNames(), ", "))
	}
	for name, v := range map[string]string{"action": f.Action, "parent": f.Parent, "after": f.After} {
		if p == nil && v != "" {
			p = checkToken(name, v, maxIDLen)
		}
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	list, next, err := s.cfg.Queries.CaughtUp(r.Context()).List(f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.ExecutionList{Executions: each(list, executionOut), Next: next})
}

func statusNames() []string {
	statuses := domain.AllStatuses[1:] // StatusNew is no status an execution shows
	out := make([]string, len(statuses))
	for i, s := range statuses {
		out[i] = string(s)
	}
	return out
}

// cancelExecution records a cancellation request → 202; 404 for an unknown
// execution, 409 for one that has ended.
func (s *Server) cancelExecution(w http.ResponseWriter, r *http.Request) {
	id, p := idParam(r)
	var reason string
	if p == nil {
		reason, p = s.decodeReason(w, r)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	a, err := s.cfg.Commands.Cancel(r.Context(), id, reason)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, wire.Accepted{ID: a.ID, Status: string(a.Status)})
}

// executionEvents pages through an execution's stream.
func (s *Server) executionEvents(w http.ResponseWriter, r *http.Request) {
	id, p := idParam(r)
	if p != nil {
		writeProblem(w, p)
		return
	}
	s.streamPage(w, r, domain.ExecutionStream(id))
}

// requestTiming reads a request's run_at (RFC 3339) and delay_seconds into
// req: a 400 problem when run_at is in another format.
func requestTiming(req *command.Request, body wire.ExecutionRequest) *Problem {
	if body.RunAt != "" {
		t, err := time.Parse(time.RFC3339Nano, body.RunAt)
		if err != nil {
			return typed(typeInvalid, http.StatusBadRequest, "run_at %q is not an RFC 3339 time (such as 2026-01-02T15:04:05Z)", clipDetail(body.RunAt))
		}
		req.RunAt = &t
	}
	if body.DelaySeconds != nil {
		if body.RunAt != "" {
			return typed(typeInvalid, http.StatusBadRequest, "give run_at or delay_seconds, not both")
		}
		req.DelaySeconds = *body.DelaySeconds
	}
	return nil
}

// clipDetail bounds a client's value quoted in a problem.
func clipDetail(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
