package worker

import (
	"context"
	"net/http"
	"net/url"
	"sync"

	"github.com/turnstile/turnstile/client/wire"
)

// The reports of a session's runs go out in batches: a report joins a
// queue, and at most maxSenders calls are in flight at once, each taking
// every report queued when it starts (up to maxBatch). Under load a call
// carries many reports, and the server decides them at once (their appends
// join one group commit); a lone report goes out at once, alone.
const (
	maxSenders = 4
	maxBatch   = 256 // below the server's bound (1000)
)

// batcher is a session's queue of reports not sent yet.
type batcher struct {
	mu      sync.Mutex
	queue   []*pendingReport
	senders int
	held    int // holds: while any, queued reports wait (see hold)
}

type pendingReport struct {
	rep  wire.WorkerReport
	done chan bool // the report's outcome: accepted, or not to be sent again
}

// send queues rep and waits until the server has answered it.
func (b *batcher) send(w *Worker, sess *session, rep wire.WorkerReport) bool {
	return <-b.queued(w, sess, rep).done
}

// queued queues rep and returns it; its done says the outcome.
func (b *batcher) queued(w *Worker, sess *session, rep wire.WorkerReport) *pendingReport {
	p := &pendingReport{rep: rep, done: make(chan bool, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	spawn := b.held == 0 && b.senders < maxSenders
	if spawn {
		b.senders++
	}
	b.mu.Unlock()
	if spawn {
		go b.loop(w, sess)
	}
	return p
}

// hold keeps the reports queued from now on until release: the running
// reports of one poll's assignments, all known at once, go out in one call
// instead of a first one alone and the rest behind it.
func (b *batcher) hold() {
	b.mu.Lock()
	b.held++
	b.mu.Unlock()
}

// release ends a hold and sends what it kept.
func (b *batcher) release(w *Worker, sess *session) {
	b.mu.Lock()
	b.held--
	spawn := b.held == 0 && len(b.queue) > 0 && b.senders < maxSenders
	if spawn {
		b.senders++
	}
	b.mu.Unlock()
	if spawn {
		go b.loop(w, sess)
	}
}

// loop sends batches until the queue is empty.
func (b *batcher) loop(w *Worker, sess *session) {
	for {
		b.mu.Lock()
		n := min(len(b.queue), maxBatch)
		if n == 0 {
			b.senders--
			b.mu.Unlock()
			return
		}
		batch := make([]*pendingReport, n)
		copy(batch, b.queue)
		clear(b.queue[:n])
		b.queue = b.queue[n:]
		b.mu.Unlock()
		w.sendBatch(sess, batch)
	}
}

// sendBatch sends batch until the server answers it and gives each report
// its outcome. A refusal of the whole batch as malformed (400: it should not
// happen, the package builds the reports) sends each report alone, so that
// one bad report does not take the others with it.
func (w *Worker) sendBatch(sess *session, batch []*pendingReport) {
	answer := func(ok bool) {
		for _, p := range batch {
			p.done <- ok
		}
	}
	path := "/api/v1/workers/" + url.PathEscape(w.cfg.Name) + "/report"
	for try := 0; ; try++ {
		var status int
		var err error
		var results []wire.WorkerReportResult
		if len(batch) == 1 {
			var out wire.WorkerReportResult
			status, err = w.call(context.Background(), sess.Session, path, batch[0].rep, &out)
			results = []wire.WorkerReportResult{out}
		} else {
			reps := make([]wire.WorkerReport, len(batch))
			for i, p := range batch {
				reps[i] = p.rep
			}
			var out wire.WorkerReportResults
			status, err = w.call(context.Background(), sess.Session, path, wire.WorkerReports{Reports: reps}, &out)
			results = out.Results
		}
		switch {
		case err == nil && len(results) == len(batch):
			for i, p := range batch {
				if pr := results[i].Problem; pr != nil && pr.Status == http.StatusRequestEntityTooLarge && p.rep.Result != nil {
					p.rep = withoutResult(p.rep, pr.Detail)
					w.sendBatch(sess, []*pendingReport{p})
					continue
				}
				if pr := results[i].Problem; pr != nil {
					w.log.Warn("report refused", "execution", p.rep.Execution, "status", p.rep.Status, "problem", pr.Detail)
					p.done <- false
					continue
				}
				p.done <- true
			}
			return
		case err == nil:
			w.log.Warn("the server answered a batch of reports with a different number of results; sending them again", "sent", len(batch), "results", len(results))
		case status == http.StatusUnauthorized || status == http.StatusForbidden:
			sess.end()
			answer(false)
			return
		case status == http.StatusRequestEntityTooLarge && len(batch) == 1 && batch[0].rep.Result != nil:
			batch[0].rep = withoutResult(batch[0].rep, err.Error())
			continue
		case status/100 == 4 && status != http.StatusTooManyRequests:
			if len(batch) > 1 {
				for _, p := range batch {
					w.sendBatch(sess, []*pendingReport{p})
				}
				return
			}
			w.log.Warn("report refused", "execution", batch[0].rep.Execution, "status", batch[0].rep.Status, "err", err)
			answer(false)
			return
		}
		select {
		case <-sess.ended:
			answer(false)
			return
		default:
		}
		if try%10 == 9 {
			w.log.Warn("reports not delivered yet; still trying", "reports", len(batch), "err", err)
		}
		sleep(context.Background(), backoff(try))
	}
}

// withoutResult is rep once the server refused its result as too large
// (413: larger than its --max-result-bytes, or than a request body): a
// completed run is reported failed, saying why; another end keeps its
// status and loses its result.
func withoutResult(rep wire.WorkerReport, why string) wire.WorkerReport {
	rep.Result = nil
	if rep.Status == wire.ReportCompleted {
		rep.Status, rep.Error = wire.ReportFailed, "the server refused the result: "+why
	}
	return rep
}
