package api

import (
	"net/http"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/projections"
)

// asOfViews returns the live views, or with ?as_of= a fold of the log up to
// that point (a full read of the log up to it: an audit query, not a hot path).
func (s *Server) asOfViews(r *http.Request) (*projections.Views, error) {
	return s.cfg.Queries.At(r.Context(), r.URL.Query().Get("as_of"))
}

func (s *Server) actionQueueStats(w http.ResponseWriter, r *http.Request) {
	s.actionRead(w, r, func(v *projections.Views, ref string) (any, bool) {
		st, ok := v.Stats(ref)
		return withNoWorker(v, servedBy(v), statsOut(st)), ok
	})
}

func (s *Server) actionQueue(w http.ResponseWriter, r *http.Request) {
	s.actionRead(w, r, func(v *projections.Views, ref string) (any, bool) {
		q, ok := v.Queue(ref)
		return queueOut(q), ok
	})
}

func (s *Server) actionRead(w http.ResponseWriter, r *http.Request, read func(*projections.Views, string) (any, bool)) {
	ref, p := refParam(r)
	if p == nil {
		p = queryOnly(r, "as_of")
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	v, err := s.asOfViews(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, ok := read(v, ref)
	if !ok {
		writeProblem(w, typed(typeNotFound, http.StatusNotFound, "action %q is not defined", ref))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) allQueueStats(w http.ResponseWriter, r *http.Request) {
	if p := queryOnly(r, "as_of"); p != nil {
		writeProblem(w, p)
		return
	}
	v, err := s.asOfViews(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sv := servedBy(v)
	writeJSON(w, http.StatusOK, wire.QueueStatsList{Position: v.Next(), QueueStats: each(visible(r, v.AllStats(), func(st projections.QueueStats) string { return st.Action }), func(st projections.QueueStats) wire.QueueStats {
		return withNoWorker(v, sv, statsOut(st))
	})})
}

// rebuild folds the log from position 0 up to where the live views are now
// and compares: any difference is a bug in the incremental fold.
func (s *Server) rebuild(w http.ResponseWriter, r *http.Request) {
	p := queryOnly(r)
	if p == nil { // no body, or an empty object
		var none struct{}
		p = decodeJSON(w, r, s.cfg.MaxBodyBytes, &none, true)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	rb, err := s.cfg.Queries.Rebuild(r.Context(), 20)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"position": rb.Position, "equal": len(rb.Differences) == 0, "differences": rb.Differences})
}
