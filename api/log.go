package api

import (
	"context"
	"net/http"

	"github.com/turnstile/turnstile/client/wire"
)

// ArchiveStatus says how many archive segments hold the log's archived
// part. The node passes one in when it runs an archive; without one,
// GET /api/v1/log says 0.
type ArchiveStatus interface {
	ArchivedSegments(ctx context.Context) (int, error)
}

// logRoutes are the routes of the log over months (API.md).
func (s *Server) logRoutes() []Route {
	return []Route{
		// its head and digest cover every action's events
		{"logStatus", "GET", "/api/v1/log", readers, allActions, s.logStatus},
	}
}

// logStatus answers where the log stands and its current digest.
func (s *Server) logStatus(w http.ResponseWriter, r *http.Request) {
	if p := queryOnly(r); p != nil {
		writeProblem(w, p)
		return
	}
	info, err := s.cfg.Queries.Log(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.LogStatus{Head: info.Head, FirstLivePosition: info.FirstLivePosition}
	if info.Digest != nil {
		out.Digest = &wire.LogDigest{Position: info.Digest.Position, Hash: info.Digest.Hash.String()}
	}
	if s.cfg.Archive != nil {
		if out.ArchivedSegments, err = s.cfg.Archive.ArchivedSegments(r.Context()); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, out)
}
