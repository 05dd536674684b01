package api

import (
	"net/http"
	"sync"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/services/remote"
)

// reportBatch decides a batch of reports. The reports on different
// executions are decided at once, each with its own fenced append (so that
// they join the log's group commits instead of waiting for each other's
// fsync); the reports on one execution are decided one after the other, in
// the batch's order. Each report is fenced and idempotent as a single one
// is. It returns one result per report, in order, or the problem that
// refuses the whole answer: the session ended (401) or the log failed
// (5xx); some of the batch may have been written then, and sending it again
// writes nothing twice.
func (s *Server) reportBatch(r *http.Request, x remote.Session, reps []wire.WorkerReport) (wire.WorkerReportResults, *Problem) {
	res := wire.WorkerReportResults{Results: make([]wire.WorkerReportResult, len(reps))}
	byExec := map[string][]int{}
	var order []string
	for i, rep := range reps {
		if byExec[rep.Execution] == nil {
			order = append(order, rep.Execution)
		}
		byExec[rep.Execution] = append(byExec[rep.Execution], i)
	}
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		fatal     *Problem
		fatalRank int
	)
	decide := func(idx []int) { // the reports on one execution, in order
		for _, i := range idx {
			rep := reps[i]
			out, err := s.cfg.Remote.Report(r.Context(), x, remote.Report(rep))
			if err == nil {
				res.Results[i] = wire.WorkerReportResult{Execution: out.Execution, Status: out.Status}
				continue
			}
			p := s.remoteProblem(r, err)
			if p.Status == http.StatusUnauthorized || p.Status >= 500 {
				mu.Lock()
				if rank := fatalOrder(p.Status); fatal == nil || rank > fatalRank {
					fatal, fatalRank = p, rank
				}
				mu.Unlock()
				return // the later reports on this execution are not tried
			}
			res.Results[i] = wire.WorkerReportResult{Execution: rep.Execution, Status: rep.Status, Problem: p}
		}
	}
	if len(order) == 1 {
		decide(byExec[order[0]]) // one execution: no goroutine to wait for
	} else {
		sem := make(chan struct{}, batchParallel)
		for _, id := range order {
			wg.Add(1)
			sem <- struct{}{}
			go func(idx []int) {
				defer func() { <-sem; wg.Done() }()
				decide(idx)
			}(byExec[id])
		}
	}
	wg.Wait()
	if fatal != nil {
		return wire.WorkerReportResults{}, fatal
	}
	return res, nil
}

// batchParallel bounds the reports of one batch decided at once.
const batchParallel = 64

// fatalOrder ranks the problems that refuse a whole batch: an ended
// session (the worker must register again) outranks a failing log (the
// worker sends the batch again).
func fatalOrder(status int) int {
	if status == http.StatusUnauthorized {
		return 2
	}
	return 1
}
