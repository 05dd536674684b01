// Scopes: a token limited to some actions (scope=PREFIX) requests,
// defines, changes and sees only those actions and their executions and
// schedules. Each route declares how (Route.Scope, a ScopeRule): out of
// scope, a write that names the action is 403 (the ref itself says it is
// out of scope, so 403 tells nothing) and anything else is 404, as if it
// did not exist; lists leave out what is out of scope; feeds must name an
// action in scope; and the routes that show or serve every action (the
// whole log, the audit, metrics, workers) are closed to a scoped token.
package api

import (
	"net/http"

	"github.com/gorilla/mux"

	"github.com/turnstile/turnstile/domain"
)

// ScopeKind is how a token's scope applies to a route.
type ScopeKind int

// The kinds of ScopeRule. The router (wrap) applies those that a path
// names (ScopeByRef, ScopeByExecution, ScopeByStream, ScopeBySchedule) and
// ScopeAllActions before the handler runs; the handler applies the others.
const (
	scopeUndeclared  ScopeKind = iota // the zero value: a route must declare one of the others
	ScopeByRef                        // {ref} names the action: a read out of scope is 404, a write 403
	ScopeByExecution                  // {id} names an execution; its action decides: 404 out of scope
	ScopeByStream                     // {stream} names a stream; its action's scope decides: 404 (worker streams: 404)
	ScopeBySchedule                   // {ref} names a schedule; its action decides: 404 out of scope
	ScopeByBody                       // the body names the action: 403 out of scope, nothing written
	ScopeFiltered                     // a list: what is out of scope is left out
	ScopeFeed                         // a feed: ?action= must name an action in scope (403 otherwise)
	ScopeAllActions                   // shows or serves every action: 403 for any scoped token
	ScopeNone                         // shows and changes nothing of any action; ScopeRule.Why says why
)

var scopeKindNames = [...]string{"undeclared", "action-ref", "execution", "stream", "schedule", "body-action",
	"filtered", "feed-action", "unscoped-only", "none"}

// String is the kind's name, as the OpenAPI document's x-scope gives it.
func (k ScopeKind) String() string {
	if k < 0 || int(k) >= len(scopeKindNames) {
		return "undeclared"
	}
	return scopeKindNames[k]
}

// ScopeRule is a route's declaration of how a scoped token is limited on it.
type ScopeRule struct {
	Kind ScopeKind
	Why  string // for ScopeNone: why the route needs no check
}

// Declared reports whether the rule is one of the kinds, and a ScopeNone
// says why.
func (sr ScopeRule) Declared() bool {
	return sr.Kind > scopeUndeclared && int(sr.Kind) < len(scopeKindNames) && (sr.Kind != ScopeNone || sr.Why != "")
}

// Short names for the route tables.
var (
	byRef       = ScopeRule{Kind: ScopeByRef}
	byExecution = ScopeRule{Kind: ScopeByExecution}
	byStream    = ScopeRule{Kind: ScopeByStream}
	bySchedule  = ScopeRule{Kind: ScopeBySchedule}
	byBody      = ScopeRule{Kind: ScopeByBody}
	filtered    = ScopeRule{Kind: ScopeFiltered}
	byFeed      = ScopeRule{Kind: ScopeFeed}
	allActions  = ScopeRule{Kind: ScopeAllActions}
)

func noScope(why string) ScopeRule { return ScopeRule{Kind: ScopeNone, Why: why} }

// inScope applies rt's rule where the path or the route decides it: nil
// when r's principal may go on to the handler. A path value that does not
// validate is left to the handler (it answers 400).
func (s *Server) inScope(r *http.Request, rt Route) *Problem {
	if !principalOf(r).Scoped() {
		return nil
	}
	vars := mux.Vars(r)
	switch rt.Scope.Kind {
	case ScopeByRef:
		ref := vars["ref"]
		if domain.ValidateRef(ref) != nil {
			return nil
		}
		if rt.Method == http.MethodGet {
			return maySee(r, ref)
		}
		return mayWrite(r, ref)
	case ScopeByExecution:
		if checkToken("execution id", vars["id"], maxIDLen) != nil {
			return nil
		}
		return s.maySeeExecution(r, vars["id"])
	case ScopeByStream:
		if checkToken("stream", vars["stream"], maxStreamLen) != nil {
			return nil
		}
		return s.maySeeStream(r, vars["stream"])
	case ScopeBySchedule:
		return s.maySeeSchedule(r, vars["ref"])
	case ScopeAllActions:
		return maySeeAllActions(r)
	}
	return nil
}

// maySeeSchedule is nil when r's principal may see schedule ref (its
// action is in scope, or it was never defined: the handler answers that),
// else a 404 problem. A deleted schedule's action still decides.
func (s *Server) maySeeSchedule(r *http.Request, ref string) *Problem {
	if domain.ValidateRef(ref) != nil {
		return nil
	}
	sc, err := s.cfg.Commands.LoadSchedule(r.Context(), ref)
	if err != nil || sc.Def.Action == "" || principalOf(r).InScope(sc.Def.Action) {
		return nil
	}
	return scheduleNotFound(ref)
}

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

// maySeeAllActions is nil unless r's principal is scoped: the whole log (and
// every route that shows or serves every action) shows every action.
func maySeeAllActions(r *http.Request) *Problem {
	if p := principalOf(r); p.Scoped() {
		return typed(typeForbidden, http.StatusForbidden, "token %s is limited to actions %v: this route shows or serves every action; read their streams (GET /api/v1/streams/…) or their feeds (?action=)", p.Name, p.Scope)
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
