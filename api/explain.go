package api

import (
	"net/http"
	"time"

	"github.com/turnstile/turnstile/client/wire"
)

// explainExecution answers why an execution is not running now, from the
// fold the executor decides with (projections.State.Explain).
func (s *Server) explainExecution(w http.ResponseWriter, r *http.Request) {
	id, p := idParam(r)
	if p == nil {
		p = queryOnly(r)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	e, ok := s.cfg.Queries.Explain(r.Context(), id, time.Now())
	if !ok {
		writeProblem(w, typed(typeNotFound, http.StatusNotFound, "no execution %q", id))
		return
	}
	out := wire.Explanation{Status: string(e.Status), QueuePlace: e.Position, Position: e.Position, Ahead: e.Ahead,
		WaitingFor: e.WaitingFor, Reasons: make([]wire.WaitReason, 0, len(e.Reasons)), LogPosition: e.LogAt}
	for _, r := range e.Reasons {
		wr := wire.WaitReason{Reason: r.Reason, Resource: r.Resource, Key: r.Key, InUse: r.InUse, MaxConcurrent: r.MaxConcurrent}
		if rl := r.RateLimit; rl != nil {
			wr.RateLimit = &wire.RateLimit{Count: rl.Count, PerSeconds: rl.PerSeconds}
		}
		out.Reasons = append(out.Reasons, wr)
	}
	writeJSON(w, http.StatusOK, out)
}
