package api

import (
	"errors"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
)

// actionFromLog returns the action as the log holds it (the views may not
// have caught up with a write that was just acknowledged).
func (s *Server) actionFromLog(r *http.Request, ref string) (wire.Action, error) {
	a, found, err := s.cfg.Queries.ActionFromLog(r.Context(), ref)
	if err == nil && !found {
		err = typed(typeNotFound, http.StatusNotFound, "action %q is not defined", ref)
	}
	return actionOut(a), err
}

// actionState is an action as a command left it.
func (s *Server) actionState(a *domain.Action) wire.Action {
	return actionOut(projections.ActionView{Policy: a.Policy(), Paused: a.Paused(), Version: a.Version(),
		Served: s.cfg.Queries.Views().Served(a.Policy().Runner)})
}

func refParam(r *http.Request) (string, *Problem) {
	ref := mux.Vars(r)["ref"]
	if err := domain.ValidateRef(ref); err != nil {
		return "", typed(typeInvalid, http.StatusBadRequest, "%v", err)
	}
	return ref, nil
}

// createAction defines an action: 201 when new, 200 when the same policy is
// already defined, 409 when a different one is.
func (s *Server) createAction(w http.ResponseWriter, r *http.Request) {
	var body policyBody
	prob := decodeJSON(w, r, s.cfg.MaxBodyBytes, &body, false)
	if prob == nil {
		prob = body.refused()
	}
	if prob != nil {
		writeProblem(w, prob)
		return
	}
	p := policyIn(body.Policy)
	if prob := mayWrite(r, p.Ref); prob != nil {
		writeProblem(w, prob)
		return
	}
	a, created, err := s.cfg.Commands.ChangeAction(r.Context(), p.Ref, command.Define(p))
	if errors.Is(err, domain.ErrConflict) {
		writeProblem(w, typed(typeConflict, http.StatusConflict, "action %q is already defined with a different policy; change it with PUT /api/v1/actions/%s/policy", p.Ref, p.Ref))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/api/v1/actions/"+p.Ref)
	}
	writeJSON(w, status, s.actionState(a))
}

func (s *Server) listActions(w http.ResponseWriter, r *http.Request) {
	if p := queryOnly(r); p != nil {
		writeProblem(w, p)
		return
	}
	writeJSON(w, http.StatusOK, wire.ActionList{Actions: each(visible(r, s.cfg.Queries.CaughtUp(r.Context()).Actions(), func(a projections.ActionView) string { return a.Policy.Ref }), actionOut)})
}

func (s *Server) getAction(w http.ResponseWriter, r *http.Request) {
	ref, p := refParam(r)
	if p == nil {
		p = queryOnly(r)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	a, err := s.actionFromLog(r, ref)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

// decodeReason reads an optional {"reason": "..."} body.
func (s *Server) decodeReason(w http.ResponseWriter, r *http.Request) (string, *Problem) {
	var body wire.Reason
	if p := decodeJSON(w, r, s.cfg.MaxBodyBytes, &body, true); p != nil {
		return "", p
	}
	if len(body.Reason) > domain.MaxReasonLen {
		return "", typed(typeInvalid, http.StatusBadRequest, "reason is longer than %d bytes", domain.MaxReasonLen)
	}
	return body.Reason, nil
}

func (s *Server) pauseAction(w http.ResponseWriter, r *http.Request)  { s.pauseOrResume(w, r, true) }
func (s *Server) resumeAction(w http.ResponseWriter, r *http.Request) { s.pauseOrResume(w, r, false) }

// pauseOrResume answers 200 with the action's state; pausing a paused
// action (or resuming a running one) changes nothing and is not an error.
func (s *Server) pauseOrResume(w http.ResponseWriter, r *http.Request, pause bool) {
	ref, p := refParam(r)
	var reason string
	if p == nil {
		reason, p = s.decodeReason(w, r)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	change := command.Resume()
	if pause {
		change = command.Pause(reason)
	}
	a, _, err := s.cfg.Commands.ChangeAction(r.Context(), ref, change) // an undefined action is ErrUnknownAction: 404
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.actionState(a))
}

// changePolicy replaces an action's policy; it applies from the next grant.
func (s *Server) changePolicy(w http.ResponseWriter, r *http.Request) {
	ref, p := refParam(r)
	var body policyBody
	if p == nil {
		p = decodeJSON(w, r, s.cfg.MaxBodyBytes, &body, false)
	}
	if p == nil {
		p = body.refused()
	}
	pol := policyIn(body.Policy)
	if p == nil && pol.Ref != "" && pol.Ref != ref {
		p = typed(typeInvalid, http.StatusBadRequest, "the body's ref %q differs from the path's %q", clip(pol.Ref), ref)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	pol.Ref = ref
	a, _, err := s.cfg.Commands.ChangeAction(r.Context(), ref, command.SetPolicy(pol))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.actionState(a))
}
