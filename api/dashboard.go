package api

import (
	"net/http"
	"strings"
	"time"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/projections"
)

// The routes the dashboard needs beside the others: a page of one queue's
// waiters (a queue may hold 100,000), the caller's role (to show only the
// controls it may use; the routes enforce it anyway) and the audit's verdict.

// maxWaiterPage bounds one page of waiters.
const maxWaiterPage = 1000

// waiters answers a page of an action's waiters in FIFO order.
func (s *Server) waiters(w http.ResponseWriter, r *http.Request) {
	ref, p := refParam(r)
	if p == nil {
		p = queryOnly(r, "offset", "limit")
	}
	var offset, limit uint64
	if p == nil {
		offset, p = queryUint(r, "offset", 0)
	}
	if p == nil {
		limit, p = queryUint(r, "limit", 100)
		if p == nil && (limit < 1 || limit > maxWaiterPage) {
			p = typed(typeInvalid, http.StatusBadRequest, "limit=%d is out of range 1..%d", limit, maxWaiterPage)
		}
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	offset = min(offset, 1<<40) // past any queue; keeps offset+limit an int
	q, total, ok := s.cfg.Queries.Views().QueuePage(ref, int(offset), int(limit))
	if !ok {
		writeProblem(w, typed(typeNotFound, http.StatusNotFound, "action %q is not defined", ref))
		return
	}
	writeJSON(w, http.StatusOK, waiterPage(q, total, int(offset)))
}

func waiterPage(q projections.QueueContents, total, offset int) wire.WaiterPage {
	out := wire.WaiterPage{Action: q.Action, Paused: q.Paused, Total: total, Offset: offset,
		Waiting: make([]wire.Waiter, 0, len(q.Waiting)), Active: q.Active, Position: q.Position}
	for _, x := range q.Waiting {
		out.Waiting = append(out.Waiting, wire.Waiter{ID: x.ID, ConcurrencyKey: x.ConcurrencyKey, Position: x.Position, EnqueuedAt: x.EnqueuedAt, Priority: x.Priority})
	}
	if out.Active == nil {
		out.Active = []string{}
	}
	return out
}

// whoami answers the role of the presented token.
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	if p := queryOnly(r); p != nil {
		writeProblem(w, p)
		return
	}
	if s.cfg.Tokens.Empty() {
		writeJSON(w, http.StatusOK, wire.WhoAmI{Role: string(RoleAdmin), Anonymous: true})
		return
	}
	_, secret, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	p, _ := s.cfg.Tokens.principal(strings.TrimSpace(secret)) // the route's roles checked it already
	if p == nil {
		writeProblem(w, typed(typeUnauthorized, http.StatusUnauthorized, "no such token"))
		return
	}
	writeJSON(w, http.StatusOK, wire.WhoAmI{Role: string(p.Role), Principal: p.Name})
}

// audit runs the audit over the whole log, one at a time (it reads the
// whole log: a second caller waits for the first to finish).
func (s *Server) audit(w http.ResponseWriter, r *http.Request) {
	if p := queryOnly(r); p != nil {
		writeProblem(w, p)
		return
	}
	select {
	case s.auditing <- struct{}{}:
		defer func() { <-s.auditing }()
	case <-r.Context().Done():
		return
	}
	start := time.Now()
	rep, err := s.cfg.Queries.Audit(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.AuditVerdict{OK: rep.OK(), Events: rep.Events, Executions: rep.Executions, Ended: rep.Ended, Open: len(rep.Open),
		Grants: rep.Grants, ByStatus: rep.ByStatus, Violations: make([]wire.AuditViolation, 0, len(rep.Violations)),
		Seconds: time.Since(start).Seconds()}
	if f := rep.From; f != nil {
		out.From = &wire.AuditFrom{LiveStart: f.LiveStart, Checkpoint: f.Checkpoint, NotJudged: f.NotJudged}
	}
	for _, v := range rep.Violations {
		out.Violations = append(out.Violations, wire.AuditViolation{Position: v.Position, Stream: v.Stream, Type: v.Type,
			Rule: v.Rule, Detail: v.Detail, Principal: v.Principal})
	}
	writeJSON(w, http.StatusOK, out)
}
