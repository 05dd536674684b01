// Scopes: a token limited to some actions (scope=PREFIX) requests,
// defines, changes and sees only those actions and their executions. Out of
// scope, a write is 403 and a read is 404 (as if the action or execution did
// not exist); lists leave out what is out of scope; the whole log (GET
// /api/v1/events) is closed to a scoped token, and its feeds must name an
// action in scope.
package api

import (
	"net/http"

	"github.com/turnstile/turnstile/domain"
)

// mayWrite is nil when r's principal may request, define or change action
// ref, else a 403 problem.
func mayWrite(r *http.Request, ref string) *Problem {
	if p := principalOf(r); !p.InScope(ref) {
		return typed(typeForbidden, http.StatusForbidden, "action %q is outside the scope of token %s (%v)", clip(ref), p.Name, p.Scope)
	}
	return nil
}

// maySee is nil when r's principal may see action ref, else a 404 problem.
func maySee(r *http.Request, ref string) *Problem {
	if !principalOf(r).InScope(ref) {
		return typed(typeNotFound, http.StatusNotFound, "action %q is not defined", clip(ref))
	}
	return nil
}

// maySeeExecution is nil when r's principal may see execution id (its
// action is in scope), else a 404 problem. For an unscoped principal it
// reads nothing.
func (s *Server) maySeeExecution(r *http.Request, id string) *Problem {
	if !principalOf(r).Scoped() {
		return nil
	}
	v, found, err := s.cfg.Queries.Execution(r.Context(), id)
	if err != nil {
		if p := asProblem(err); p != nil {
			return p
		}
		return typed(typeUnavailable, http.StatusServiceUnavailable, "the log is not available now")
	}
	if !found || !principalOf(r).InScope(v.Action) {
		return typed(typeNotFound, http.StatusNotFound, "no execution %q", id)
	}
	return nil
}

// maySeeStream is nil when r's principal may read stream: an action's or
// queue's stream of an action in scope, or an execution's stream of one.
func (s *Server) maySeeStream(r *http.Request, stream string) *Problem {
	if !principalOf(r).Scoped() {
		return nil
	}
	switch cat, id := domain.SplitStream(stream); cat {
	case domain.StreamAction, domain.StreamQueue:
		if maySee(r, id) == nil {
			return nil
		}
	case domain.StreamExecution:
		if s.maySeeExecution(r, id) == nil {
			return nil
		}
	}
	return typed(typeNotFound, http.StatusNotFound, "no stream %q", clip(stream))
}

// mayReadLog is nil unless r's principal is scoped: the whole log shows
// every action.
func mayReadLog(r *http.Request) *Problem {
	if p := principalOf(r); p.Scoped() {
		return typed(typeForbidden, http.StatusForbidden, "token %s is limited to actions %v: read their streams (GET /api/v1/streams/…) or their feeds (?action=), not the whole log", p.Name, p.Scope)
	}
	return nil
}

// mayFollow is nil when r's principal may follow a feed filtered to action
// (""; every action): a scoped token must name an action in its scope.
func mayFollow(r *http.Request, action string) *Problem {
	p := principalOf(r)
	if !p.Scoped() {
		return nil
	}
	if action == "" {
		return typed(typeForbidden, http.StatusForbidden, "token %s is limited to actions %v: name one with ?action=", p.Name, p.Scope)
	}
	return mayWrite(r, action) // 403: the caller named it
}

// visible keeps the items whose action r's principal may see.
func visible[T any](r *http.Request, items []T, ref func(T) string) []T {
	p := principalOf(r)
	if !p.Scoped() {
		return items
	}
	out := items[:0:0]
	for _, it := range items {
		if p.InScope(ref(it)) {
			out = append(out, it)
		}
	}
	return out
}
