package api

import (
	"net/http"

	"github.com/turnstile/turnstile/projections"
)

// asOfViews returns the live views, or with ?as_of= a fold of the log up to
// that point (a full read of the log up to it: an audit query, not a hot path).
func (s *Server) asOfViews(r *http.Request) (*projections.Views, *Problem, error) {
	asOf := r.URL.Query().Get("as_of")
	if asOf == "" {
		s.caughtUp(r.Context())
		return s.cfg.Views, nil, nil
	}
	cut, err := projections.ParseCut(asOf)
	if err != nil {
		return nil, typed(typeInvalid, http.StatusBadRequest, "%v", err), nil
	}
	v, err := projections.ViewsAsOf(r.Context(), s.cfg.Store, cut)
	return v, nil, err
}

func (s *Server) actionQueueStats(w http.ResponseWriter, r *http.Request) {
	s.actionRead(w, r, func(v *projections.Views, ref string) (any, bool) { return v.Stats(ref) })
}

func (s *Server) actionQueue(w http.ResponseWriter, r *http.Request) {
	s.actionRead(w, r, func(v *projections.Views, ref string) (any, bool) { return v.Queue(ref) })
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
	v, p, err := s.asOfViews(r)
	if p != nil {
		writeProblem(w, p)
		return
	}
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
	v, p, err := s.asOfViews(r)
	if p != nil {
		writeProblem(w, p)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"queue_stats": v.AllStats(), "position": v.Next()})
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
	live := s.cfg.Views
	at := live.Next()
	if at == 0 {
		writeJSON(w, http.StatusOK, map[string]any{"position": 0, "equal": true, "differences": []string{}})
		return
	}
	fresh := projections.NewViews()
	fresh.Retain(live.Retention()) // the same executions forgotten, so the same kept
	// The live views go on folding meanwhile: bring the fresh fold to where
	// they are and compare when both stand at the same position.
	for {
		if err := fresh.CatchUpTo(r.Context(), s.cfg.Store, live.Next()); err != nil {
			s.fail(w, r, err)
			return
		}
		if diffs, ok := projections.CompareAt(live, fresh, 20); ok {
			writeJSON(w, http.StatusOK, map[string]any{"position": fresh.Next(), "equal": len(diffs) == 0, "differences": diffs})
			return
		}
		if err := r.Context().Err(); err != nil {
			return
		}
	}
}
