package api

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
)

// executionRequest is the body of POST /api/v1/executions.
type executionRequest struct {
	Action      string            `json:"action"`
	Input       json.RawMessage   `json:"input,omitempty"`
	WithItems   []json.RawMessage `json:"with_items,omitempty"`
	Concurrency int               `json:"concurrency,omitempty"`
}

// MaxItems caps with_items.
const MaxItems = 10_000

type accepted struct {
	ID     string        `json:"id"`
	Status domain.Status `json:"status"`
}

// requestExecution appends execution.requested and answers 202. The same
// Idempotency-Key with the same body answers the same id (with the header
// Idempotent-Replayed: true); with another body, 409.
func (s *Server) requestExecution(w http.ResponseWriter, r *http.Request) {
	var body executionRequest
	if p := decodeJSON(w, r, s.cfg.MaxBodyBytes, &body, false); p != nil {
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
	if err := domain.ValidateRef(body.Action); err != nil {
		writeProblem(w, typed(typeInvalid, http.StatusBadRequest, "action: %v", err))
		return
	}
	if len(body.Input) > 0 {
		if err := domain.ValidateInput(body.Input); err != nil {
			writeProblem(w, typed(typeInvalid, http.StatusBadRequest, "input: %v", err))
			return
		}
	}
	if p := checkItems(body); p != nil {
		writeProblem(w, p)
		return
	}
	if err := s.actionDefined(r, body.Action); err != nil {
		s.fail(w, r, err)
		return
	}
	if p := s.earlyRefusal(w, r, body, key); p != nil {
		writeProblem(w, p)
		return
	}
	id, created, err := s.cfg.Commands.Request(r.Context(), command.Request{
		Action: body.Action, Input: body.Input, IdempotencyKey: key,
		WithItems: body.WithItems, Concurrency: body.Concurrency,
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/v1/executions/"+id)
	if !created {
		w.Header().Set("Idempotent-Replayed", "true")
		status := domain.StatusRequested
		if v, ok := s.cfg.Views.View(id); ok {
			status = v.Status
		}
		writeJSON(w, http.StatusAccepted, accepted{ID: id, Status: status})
		return
	}
	writeJSON(w, http.StatusAccepted, accepted{ID: id, Status: domain.StatusRequested})
}

// earlyRefusal answers 429, with nothing written, a request that the
// action's queue would refuse as the read model last folded it: the queue is
// full, or on_limit is reject and no slot is free or the rate limit is
// reached (then Retry-After says when room comes back). A flood of requests
// to one action thus costs the log nothing, and other actions keep flowing.
// Requests that pass on a read model a little behind are still judged by
// the fold at their position and end rejected. A retry of a request already
// recorded (same Idempotency-Key) is not refused here: it gets its answer.
// A with_items parent takes no slot; its children are judged one by one.
func (s *Server) earlyRefusal(w http.ResponseWriter, r *http.Request, body executionRequest, key string) *Problem {
	if body.WithItems != nil {
		return nil
	}
	code, reason, retryAfter := s.cfg.Views.Refusal(body.Action, body.Input, time.Now())
	if code == "" {
		return nil
	}
	if key != "" {
		id := command.IDForKey(key)
		if _, ok := s.cfg.Views.View(id); ok {
			return nil
		}
		if _, err := s.cfg.Store.ReadStream(r.Context(), domain.ExecutionStream(id), 0, 1); err == nil {
			return nil
		}
	}
	typ := typeQueueFull
	switch code {
	case domain.RejectNoSlot:
		typ = typeNoSlot
	case domain.RejectRateLimited:
		typ = typeRateLimited
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(max(retryAfter.Seconds(), 1))), 10))
	}
	return typed(typ, http.StatusTooManyRequests, "%s; nothing was recorded", reason)
}

func checkItems(b executionRequest) *Problem {
	if b.WithItems == nil {
		if b.Concurrency != 0 {
			return typed(typeInvalid, http.StatusBadRequest, "concurrency applies only with with_items")
		}
		return nil
	}
	if len(b.WithItems) == 0 || len(b.WithItems) > MaxItems {
		return typed(typeInvalid, http.StatusBadRequest, "with_items holds %d items; it must hold 1..%d", len(b.WithItems), MaxItems)
	}
	if b.Concurrency < 0 || b.Concurrency > domain.MaxConcurrentLimit {
		return typed(typeInvalid, http.StatusBadRequest, "concurrency %d is out of range 1..%d", b.Concurrency, domain.MaxConcurrentLimit)
	}
	return nil
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
	if asOf := r.URL.Query().Get("as_of"); asOf != "" {
		cut, err := projections.ParseCut(asOf)
		if err != nil {
			writeProblem(w, typed(typeInvalid, http.StatusBadRequest, "%v", err))
			return
		}
		v, found, err := projections.ExecutionAsOf(r.Context(), s.cfg.Store, id, cut)
		if errors.Is(err, eventstore.ErrStreamNotFound) || (err == nil && !found) {
			writeProblem(w, typed(typeNotFound, http.StatusNotFound, "execution %q did not exist as of %s", id, clip(asOf)))
			return
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
		return
	}
	v, ok := s.cfg.Views.View(id)
	if !ok {
		s.caughtUp(r.Context())
		v, ok = s.cfg.Views.View(id)
	}
	if !ok && s.cfg.Views.Retention() > 0 {
		// An ended execution the read model has forgotten (serve
		// --retain-ended) is still in the log: fold its stream.
		var err error
		v, ok, err = projections.ExecutionAsOf(r.Context(), s.cfg.Store, id, projections.Cut{Position: math.MaxUint64})
		if err != nil && !errors.Is(err, eventstore.ErrStreamNotFound) {
			s.fail(w, r, err)
			return
		}
	}
	if !ok {
		writeProblem(w, typed(typeNotFound, http.StatusNotFound, "no execution %q", id))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// listExecutions pages through executions, newest first.
func (s *Server) listExecutions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := queryOnly(r, "action", "status", "parent", "limit", "after")
	f := projections.ListFilter{Action: q.Get("action"), Status: domain.Status(q.Get("status")), Parent: q.Get("parent"), After: q.Get("after")}
	if p == nil {
		f.Limit, p = queryLimit(r, defaultPageLimit)
	}
	if p == nil && f.Status != "" && !knownStatus(f.Status) {
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
	s.caughtUp(r.Context())
	list, next, err := s.cfg.Views.List(f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"executions": list, "next": next})
}

var statuses = []domain.Status{domain.StatusRequested, domain.StatusScheduling, domain.StatusScheduled, domain.StatusRunning,
	domain.StatusCompleted, domain.StatusFailed, domain.StatusTimedOut, domain.StatusCancelled, domain.StatusRejected}

func knownStatus(s domain.Status) bool {
	for _, k := range statuses {
		if s == k {
			return true
		}
	}
	return false
}

func statusNames() []string {
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
	if _, err := s.cfg.Store.ReadStream(r.Context(), domain.ExecutionStream(id), 0, 1); err != nil {
		if errors.Is(err, eventstore.ErrStreamNotFound) {
			writeProblem(w, typed(typeNotFound, http.StatusNotFound, "no execution %q", id))
			return
		}
		s.fail(w, r, err)
		return
	}
	if reason == "" {
		reason = "cancelled by a client"
	}
	if err := s.cfg.Commands.RequestCancel(r.Context(), id, reason); err != nil {
		if errors.Is(err, domain.ErrAlreadyTerminal) {
			writeProblem(w, typed(typeAlreadyEnded, http.StatusConflict, "execution %q has already ended; there is nothing to cancel", id))
			return
		}
		s.fail(w, r, err)
		return
	}
	status := domain.StatusRequested
	s.caughtUp(r.Context())
	if v, ok := s.cfg.Views.View(id); ok {
		status = v.Status
	}
	writeJSON(w, http.StatusAccepted, accepted{ID: id, Status: status})
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

func (s *Server) workers(w http.ResponseWriter, r *http.Request) {
	if p := queryOnly(r); p != nil {
		writeProblem(w, p)
		return
	}
	s.caughtUp(r.Context())
	writeJSON(w, http.StatusOK, map[string]any{"workers": s.cfg.Views.Workers()})
}
