package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/projections"
)

// typeTooManyWorkers is the problem of a registration beyond the token's
// bound on live worker names (remote.ErrTooManyNames).
const typeTooManyWorkers = "https://turnstile.dev/problems/too-many-workers"

// endedWorkersListed is how long after its last sign of life a lost or
// stopped worker is still listed by GET /api/v1/workers (?all=true lists
// every worker the log knows).
const endedWorkersListed = time.Hour

// workers pages through the workers, by id: the live ones, and those that
// ended (lost or stopped) within endedWorkersListed, or with ?all=true
// every one. unserved_runners is over all workers, whatever the page.
func (s *Server) workers(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := queryOnly(r, "limit", "after", "all")
	f := projections.WorkerFilter{After: q.Get("after"), EndedBefore: time.Now().Add(-endedWorkersListed)}
	if p == nil {
		f.Limit, p = queryLimit(r, defaultPageLimit)
	}
	if p == nil && f.After != "" {
		p = checkToken("after", f.After, maxIDLen)
	}
	if p == nil && q.Has("all") {
		all, err := strconv.ParseBool(q.Get("all"))
		if err != nil {
			p = typed(typeInvalid, http.StatusBadRequest, "all %q must be true or false", clip(q.Get("all")))
		} else if all {
			f.EndedBefore = time.Time{}
		}
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	v := s.cfg.Queries.CaughtUp(r.Context())
	list, next := v.WorkerPage(f)
	writeJSON(w, http.StatusOK, wire.WorkerList{Workers: each(list, workerOut), Next: next, UnservedRunners: unservedRunners(v, servedBy(v))})
}
