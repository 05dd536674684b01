package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
)

// resourceRoutes are the resources' routes (see docs/policies.md,
// "Resources"). A resource is shared by every action that names it, so a
// token limited to some actions neither sees nor changes one.
func (s *Server) resourceRoutes() []Route {
	return []Route{
		{"putResource", "PUT", "/api/v1/resources/{name}", adminOnly, allActions, s.putResource},
		{"listResources", "GET", "/api/v1/resources", readers, allActions, s.listResources},
		{"getResource", "GET", "/api/v1/resources/{name}", readers, allActions, s.getResource},
		{"deleteResource", "DELETE", "/api/v1/resources/{name}", adminOnly, allActions, s.deleteResource},
	}
}

func resourceNotFound(name string) *Problem {
	return typed(typeNotFound, http.StatusNotFound, "resource %q is not defined", clip(name))
}

func nameParam(r *http.Request) (string, *Problem) {
	name := mux.Vars(r)["name"]
	if err := domain.ValidateResourceName(name); err != nil {
		return "", typed(typeInvalid, http.StatusBadRequest, "%v", err)
	}
	return name, nil
}

// maxResourceKeys is the default and largest page of a resource's keys.
const maxResourceKeys = 1000

func resourceOut(v projections.ResourceView, from, limit int) wire.Resource {
	out := wire.Resource{Name: v.Name, MaxConcurrent: v.Limit.MaxConcurrent, KeyField: v.Limit.KeyField,
		InUse: v.InUse, Waiting: v.Waiting, Keys: []wire.ResourceKey{}}
	if rl := v.Limit.RateLimit; rl != nil {
		out.RateLimit = &wire.RateLimit{Count: rl.Count, PerSeconds: rl.PerSeconds}
	}
	for i := from; i < len(v.Keys) && len(out.Keys) < limit; i++ {
		k := v.Keys[i]
		out.Keys = append(out.Keys, wire.ResourceKey{Key: k.Key, InUse: k.InUse, Waiting: k.Waiting})
	}
	if next := from + len(out.Keys); next < len(v.Keys) {
		out.NextCursor = strconv.Itoa(next)
	}
	return out
}

// putResource defines a resource or changes its limit: 201 when new, 200
// when changed or identical; a bad name or limit is 400, nothing written.
func (s *Server) putResource(w http.ResponseWriter, r *http.Request) {
	name, p := nameParam(r)
	if p == nil {
		p = queryOnly(r)
	}
	var body wire.ResourceDefinition
	if p == nil {
		p = decodeJSON(w, r, s.cfg.MaxBodyBytes, &body, false)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	l := domain.ResourceLimit{MaxConcurrent: body.MaxConcurrent, KeyField: body.KeyField}
	if rl := body.RateLimit; rl != nil {
		l.RateLimit = &domain.RateLimit{Count: rl.Count, PerSeconds: rl.PerSeconds}
	}
	created, _, err := s.cfg.Commands.DefineResource(r.Context(), name, l)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/api/v1/resources/"+name)
	}
	out := wire.Resource{Name: name, MaxConcurrent: l.MaxConcurrent, RateLimit: body.RateLimit, KeyField: l.KeyField, Keys: []wire.ResourceKey{}}
	if v, ok := s.cfg.Queries.Views().Resource(name); ok {
		out.InUse, out.Waiting = v.InUse, v.Waiting
	}
	writeJSON(w, status, out)
}

func (s *Server) listResources(w http.ResponseWriter, r *http.Request) {
	if p := queryOnly(r); p != nil {
		writeProblem(w, p)
		return
	}
	out := wire.ResourceList{Resources: []wire.Resource{}}
	for _, v := range s.cfg.Queries.CaughtUp(r.Context()).Resources() {
		out.Resources = append(out.Resources, resourceOut(v, 0, 10))
	}
	writeJSON(w, http.StatusOK, out)
}

// getResource answers a resource's limit, use and waiters, per key value
// busiest first: ?limit= keys a page (default and at most 1000), ?cursor=
// the next page's next_cursor.
func (s *Server) getResource(w http.ResponseWriter, r *http.Request) {
	name, p := nameParam(r)
	if p == nil {
		p = queryOnly(r, "limit", "cursor")
	}
	limit, from := maxResourceKeys, 0
	if p == nil {
		limit, p = intParam(r, "limit", maxResourceKeys, 1, maxResourceKeys)
	}
	if p == nil {
		from, p = intParam(r, "cursor", 0, 0, 1<<31-1)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	v, ok := s.cfg.Queries.CaughtUp(r.Context()).Resource(name)
	if !ok {
		writeProblem(w, resourceNotFound(name))
		return
	}
	writeJSON(w, http.StatusOK, resourceOut(v, from, limit))
}

// deleteResource deletes a resource: 204; 409 while an action's policy
// names it; 404 for an unknown one.
func (s *Server) deleteResource(w http.ResponseWriter, r *http.Request) {
	name, p := nameParam(r)
	if p == nil {
		p = queryOnly(r)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	users := s.cfg.Queries.CaughtUp(r.Context()).ResourceUsers(name)
	err := s.cfg.Commands.DeleteResource(r.Context(), name, users)
	if errors.Is(err, command.ErrUnknownResource) {
		writeProblem(w, resourceNotFound(name))
		return
	}
	if errors.Is(err, domain.ErrConflict) {
		writeProblem(w, typed(typeConflict, http.StatusConflict, "%v: change those policies first", err))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// intParam reads query parameter name as an integer in [lo, hi] (def when absent).
func intParam(r *http.Request, name string, def, lo, hi int) (int, *Problem) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, typed(typeInvalid, http.StatusBadRequest, "%s must be an integer in %d..%d", name, lo, hi)
	}
	return n, nil
}
