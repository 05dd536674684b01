package api

import (
	"errors"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/projections"
)

// events pages through the whole log: ?from= (inclusive position, default 0)
// and ?limit=.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	from, limit, p := pageParams(r)
	if p != nil {
		writeProblem(w, p)
		return
	}
	page, err := s.cfg.Queries.Events(r.Context(), from, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, pageOut(page))
}

// stream pages through one stream: ?from= (inclusive version) and ?limit=.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["stream"]
	p := checkToken("stream", name, maxStreamLen)
	if p == nil {
		s.streamPage(w, r, name)
		return
	}
	writeProblem(w, p)
}

func (s *Server) streamPage(w http.ResponseWriter, r *http.Request, stream string) {
	from, limit, p := pageParams(r)
	if p != nil {
		writeProblem(w, p)
		return
	}
	page, err := s.cfg.Queries.Stream(r.Context(), stream, from, limit)
	if errors.Is(err, projections.ErrUnknownStream) {
		writeProblem(w, typed(typeNotFound, http.StatusNotFound, "no stream %q", stream))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, pageOut(page))
}

// pageOut is a page as the API sends it (no events: an empty list).
func pageOut(p projections.EventPage) wire.EventPage {
	out := wire.EventPage{Events: make([]wire.Event, len(p.Events)), Next: p.Next}
	for i := range p.Events {
		out.Events[i] = eventOut(&p.Events[i])
	}
	return out
}

// pageParams reads ?from= (inclusive, default 0) and ?limit=, and refuses
// any other query parameter.
func pageParams(r *http.Request) (from uint64, limit int, p *Problem) {
	if p = queryOnly(r, "from", "limit"); p != nil {
		return 0, 0, p
	}
	if from, p = queryUint(r, "from", 0); p != nil {
		return 0, 0, p
	}
	limit, p = queryLimit(r, defaultPageLimit)
	return from, limit, p
}
