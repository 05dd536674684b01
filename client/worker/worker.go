// Package worker runs your own code as a turnstile worker over HTTP.
//
// Register a Handler per runner name, then Run: the worker registers with
// the server (a token of role worker), long-polls for the executions handed
// to it, runs each in one of its slots and reports how it ended. The
// server's FIFO queues and per-action limits decide what runs when; an
// action whose runner is one of yours is handed only to a worker that
// serves it.
//
// What the package promises:
//   - A run starts only after the server has recorded it as running; its
//     end is reported once, retried across network errors and server
//     restarts of the connection until the server answers (a report is
//     idempotent on the server, so a retry never duplicates anything).
//   - The worker keeps its lease by itself while handlers run, however
//     long they take: its polls go on, at most half a lease apart (the
//     server cuts a poll's wait to that), and each renews the lease. A
//     handler never has to heartbeat.
//   - The handler's ctx is cancelled when a client asks to cancel the
//     execution, when the server takes it back (the worker was too slow to
//     start it, or was declared lost), when the action's timeout passes
//     (Job.Timeout, from the start; the run then reports timed_out, ahead
//     of the server's own deadline, which is the timeout plus a grace), or
//     when the drain's grace period is over.
//   - When Run's ctx ends (say, on SIGTERM via signal.NotifyContext) the
//     worker drains: it takes nothing new, lets its runs finish within
//     Config.DrainGrace, then stops them, reports, and returns.
//   - If the server says the worker's incarnation has ended (declared lost
//     after a network cut longer than the lease, or replaced), the runs of
//     that incarnation are stopped and report nothing (the server has taken
//     them back), and the worker registers again.
//
// The package imports only the standard library and the API's wire types.
package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/turnstile/turnstile/client/wire"
)

// Job is one execution handed to the worker.
type Job struct {
	Execution    string
	Action       string
	Runner       string
	Input        json.RawMessage
	RunnerConfig json.RawMessage // the action's runner_config, if any
	KeyField     string          // the action's concurrency_key: an input field that is turnstile's, not the handler's
	// ResourceKeyFields are the key fields of the keyed resources the
	// action needs: input fields that are turnstile's too.
	ResourceKeyFields []string
	Attempt           int
	Timeout           time.Duration // the action's run timeout (ctx's deadline)
}

// Handler runs a job. Its result (any value that encodes to JSON; a
// json.RawMessage is kept as is) is recorded when it returns nil. An error
// fails the execution with the error's text, or, when ctx ended first,
// records why: cancelled, timed_out, or failed by the drain.
type Handler func(ctx context.Context, job Job) (any, error)

// Failure is an error a handler returns to fail the execution with a
// result besides its message (say, what it did before it gave up).
type Failure struct {
	Message string
	Result  any // encoded to JSON
}

func (f *Failure) Error() string { return f.Message }

// Fail returns a *Failure: the execution fails with message and result.
func Fail(message string, result any) error { return &Failure{Message: message, Result: result} }

// Config configures a Worker.
type Config struct {
	Server string // base URL, e.g. http://127.0.0.1:8080
	Token  string // a token of role worker (or admin); "" for a server without tokens
	Name   string // the worker's name; default the host name
	// Slots is how many jobs run at once; default 4. The server hands the
	// worker no more executions than that at a time, counted in the log (a
	// run the server took back no longer counts, though its handler may
	// still be returning from its cancelled ctx).
	Slots int
	// DrainGrace is how long a drain lets runs finish before stopping
	// them. Default 30s.
	DrainGrace time.Duration
	// PollWait is how long a poll waits on the server for work. Default 20s.
	PollWait   time.Duration
	HTTPClient *http.Client // default: one with no overall timeout (polls are long)
	Logger     *slog.Logger // default slog.Default()
	// TracerProvider records the runs' spans (trace.go); default the
	// global one (otel.GetTracerProvider).
	TracerProvider trace.TracerProvider
}

// Worker runs handlers for the runners it registered.
type Worker struct {
	cfg      Config
	log      *slog.Logger
	handlers map[string]Handler

	mu      sync.Mutex
	runs    map[string]*run // by execution id
	running sync.WaitGroup
}

type run struct {
	attempt int
	cancel  context.CancelCauseFunc
	sess    *session
}

// New returns a worker; add handlers with Handle, then Run it.
func New(cfg Config) *Worker {
	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
	}
	if cfg.Slots <= 0 {
		cfg.Slots = 4
	}
	if cfg.DrainGrace <= 0 {
		cfg.DrainGrace = 30 * time.Second
	}
	if cfg.PollWait <= 0 {
		cfg.PollWait = 20 * time.Second
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Server = strings.TrimRight(cfg.Server, "/")
	return &Worker{cfg: cfg, log: cfg.Logger.With("worker", cfg.Name), handlers: map[string]Handler{}, runs: map[string]*run{}}
}

// Handle registers h for the runner name (say "billing.charge"). Call it
// before Run.
func (w *Worker) Handle(runner string, h Handler) { w.handlers[runner] = h }

// Causes of a run's ctx ending, besides its timeout.
var (
	// ErrCancelled: a client asked to cancel the execution.
	ErrCancelled = errors.New("turnstile: cancellation requested")
	// ErrTakenBack: the server took the execution back from this worker.
	ErrTakenBack = errors.New("turnstile: the execution was taken back from this worker")
	// ErrDrained: the drain's grace period is over.
	ErrDrained = errors.New("turnstile: the worker drained and the run did not finish within the grace period")
)

// session is one registered incarnation.
type session struct {
	wire.WorkerSession
	ended   chan struct{}
	once    sync.Once
	reports batcher
	noStart bool // the server refused a start poll: each start is reported (serve's goroutine only)
}

func (s *session) end() { s.once.Do(func() { close(s.ended) }) }

// Run registers and serves until ctx ends, then drains and returns. It
// returns an error only if the worker could not register (a bad token, a
// refused configuration); network errors are retried.
func (w *Worker) Run(ctx context.Context) error {
	if len(w.handlers) == 0 {
		return errors.New("worker: no handler registered")
	}
	for ctx.Err() == nil {
		sess, err := w.register(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		w.serve(ctx, sess)
		if ctx.Err() != nil {
			w.drain(sess)
			return nil
		}
		w.log.Warn("the server ended this incarnation (lost or replaced): its runs are stopped; registering again", "incarnation", sess.Incarnation)
	}
	return nil
}

// register registers a new incarnation, retrying network and server errors.
func (w *Worker) register(ctx context.Context) (*session, error) {
	var runners []string
	for r := range w.handlers {
		runners = append(runners, r)
	}
	var out wire.WorkerSession
	for try := 0; ; try++ {
		status, err := w.call(ctx, w.cfg.Token, "/api/v1/workers/register", wire.WorkerRegister{Name: w.cfg.Name, Runners: runners, Slots: w.cfg.Slots}, &out)
		switch {
		case err == nil:
			w.log.Info("registered", "incarnation", out.Incarnation, "runners", runners, "slots", w.cfg.Slots)
			return &session{WorkerSession: out, ended: make(chan struct{})}, nil
		case status/100 == 4 && status != http.StatusTooManyRequests:
			return nil, fmt.Errorf("worker: register: %w", err)
		}
		w.log.Warn("cannot register yet", "err", err)
		if !sleep(ctx, backoff(try)) {
			return nil, ctx.Err()
		}
	}
}

// serve polls and starts runs until ctx ends or the session does.
func (w *Worker) serve(ctx context.Context, sess *session) {
	for ctx.Err() == nil {
		select {
		case <-sess.ended:
			w.stopRuns(sess, ErrTakenBack)
			return
		default:
		}
		// Every poll asks for as many executions as the worker has slots:
		// the server hands an incarnation no more than its slots at once,
		// counted in the log (a slot is free again once the run's end is
		// recorded there, after this worker's report), so a poll never has
		// to be cut short (and its connection with it) to ask for more when
		// a slot frees.
		// A poll asks the server to record the start of what it hands
		// (one round trip and one commit less per run than a running
		// report), unless the server does not know how.
		var res wire.WorkerPollResult
		startOnPoll := !sess.noStart
		status, err := w.call(ctx, sess.Session, "/api/v1/workers/"+url.PathEscape(w.cfg.Name)+"/poll",
			wire.WorkerPoll{Max: w.cfg.Slots, WaitSeconds: w.cfg.PollWait.Seconds(), Start: startOnPoll}, &res)
		switch {
		case err == nil:
		case status == http.StatusBadRequest && startOnPoll:
			w.log.Info("the server does not start runs on a poll; reporting each start", "err", err)
			sess.noStart = true
			continue
		case status == http.StatusUnauthorized || status == http.StatusForbidden:
			sess.end()
			continue
		case ctx.Err() != nil:
			continue
		default:
			w.log.Warn("poll failed; trying again", "err", err)
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		for _, id := range res.Cancels {
			w.cancelRun(id, ErrCancelled)
		}
		sess.reports.hold() // their running reports, if any, in one call
		for _, a := range res.Assignments {
			w.start(sess, a, startOnPoll)
		}
		sess.reports.release(w, sess)
	}
}

func (w *Worker) cancelRun(id string, cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.runs[id]; r != nil {
		r.cancel(cause)
	}
}

func (w *Worker) stopRuns(sess *session, cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.runs {
		if r.sess == sess {
			r.cancel(cause)
		}
	}
}

// start takes assignment a, unless a run of it is in flight already (a
// poll returns an assignment again until it is reported on).
func (w *Worker) start(sess *session, a wire.Assignment, recorded bool) {
	w.mu.Lock()
	if r := w.runs[a.Execution]; r != nil && r.attempt == a.Attempt {
		w.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	w.runs[a.Execution] = &run{attempt: a.Attempt, cancel: cancel, sess: sess}
	w.running.Add(1)
	w.mu.Unlock()
	var started *pendingReport // the start's report; nil: the poll recorded the start
	if !recorded {
		started = sess.reports.queued(w, sess, wire.WorkerReport{Execution: a.Execution, Attempt: a.Attempt, Status: wire.ReportRunning})
	}
	go func() {
		defer w.running.Done()
		defer func() {
			w.mu.Lock()
			if r := w.runs[a.Execution]; r != nil && r.attempt == a.Attempt {
				delete(w.runs, a.Execution)
			}
			w.mu.Unlock()
			cancel(nil)
		}()
		w.execute(ctx, sess, a, started)
	}()
}

// execute waits for the start's report (queued by start; nil when the poll
// recorded the start), runs the handler and reports its end.
func (w *Worker) execute(ctx context.Context, sess *session, a wire.Assignment, started *pendingReport) {
	if started != nil {
		if ok := <-started.done; !ok {
			return
		}
	}
	rep := wire.WorkerReport{Execution: a.Execution, Attempt: a.Attempt, Status: wire.ReportRunning} // what a run taken back ends its span with
	ctx, span := w.runSpan(ctx, a)
	defer func() { endRunSpan(span, &rep) }()
	job := Job{Execution: a.Execution, Action: a.Action, Runner: a.Runner, Input: a.Input, RunnerConfig: a.RunnerConfig, KeyField: a.KeyField, ResourceKeyFields: a.ResourceKeyFields, Attempt: a.Attempt,
		Timeout: time.Duration(a.TimeoutSeconds * float64(time.Second))}
	h := w.handlers[a.Runner]
	var result any
	var err error
	if h == nil {
		err = fmt.Errorf("runner %q is not served by worker %s", a.Runner, w.cfg.Name)
	} else {
		rctx := ctx
		if job.Timeout > 0 {
			var cancel context.CancelFunc
			rctx, cancel = context.WithTimeout(ctx, job.Timeout)
			defer cancel()
		}
		result, err = safeCall(rctx, h, job)
		if err != nil && rctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			err = context.DeadlineExceeded
		}
	}
	cause := context.Cause(ctx)
	if errors.Is(cause, ErrTakenBack) {
		return // the server took it back: nothing of ours to report
	}
	rep = wire.WorkerReport{Execution: a.Execution, Attempt: a.Attempt}
	switch {
	case err == nil:
		raw, merr := marshalResult(result)
		if merr != nil {
			rep.Status, rep.Error = wire.ReportFailed, "the handler's result does not encode to JSON: "+merr.Error()
			break
		}
		rep.Status, rep.Result = wire.ReportCompleted, raw
	case errors.Is(cause, ErrCancelled):
		rep.Status, rep.Error = wire.ReportCancelled, err.Error()
	case errors.Is(cause, ErrDrained):
		rep.Status, rep.Error = wire.ReportFailed, ErrDrained.Error()
	case errors.Is(err, context.DeadlineExceeded):
		rep.Status = wire.ReportTimedOut
	default:
		rep.Status, rep.Error = wire.ReportFailed, err.Error()
		var f *Failure
		if errors.As(err, &f) {
			rep.Result, _ = marshalResult(f.Result)
		}
	}
	w.report(sess, rep)
}

// safeCall runs h, turning a panic into an error.
func safeCall(ctx context.Context, h Handler, job Job) (result any, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("the handler panicked: %v", v)
		}
	}()
	return h(ctx, job)
}

func marshalResult(v any) (json.RawMessage, error) {
	switch r := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if !json.Valid(r) {
			return nil, errors.New("invalid JSON")
		}
		return r, nil
	}
	return json.Marshal(v)
}

// report sends rep until the server answers it: true if it was accepted.
// Reports of one session are sent together (see batch.go). Network errors,
// 5xx and 429 are retried with backoff (a report is idempotent on the
// server); a refusal (409) means the server decided otherwise (taken back,
// ended): nothing more is to be done for it.
func (w *Worker) report(sess *session, rep wire.WorkerReport) bool {
	return sess.reports.send(w, sess, rep)
}

// drain tells the server to hand nothing new, lets runs finish within the
// grace period, stops the rest, and waits until every report is sent.
func (w *Worker) drain(sess *session) {
	_, err := w.call(context.Background(), sess.Session, "/api/v1/workers/"+url.PathEscape(w.cfg.Name)+"/drain", nil, nil)
	if err != nil {
		w.log.Warn("drain call failed", "err", err)
	}
	done := make(chan struct{})
	go func() { w.running.Wait(); close(done) }()
	t := time.NewTimer(w.cfg.DrainGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		w.stopRuns(sess, ErrDrained)
		<-done
	}
	w.log.Info("drained", "incarnation", sess.Incarnation)
}

// call POSTs body (JSON) to path with the bearer secret and decodes a 2xx
// answer into out. A non-2xx answer gives its status and its problem's text.
func (w *Worker) call(ctx context.Context, secret, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.Server+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := w.cfg.HTTPClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode/100 != 2 {
		var p wire.Problem
		_ = json.Unmarshal(raw, &p)
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", req.Method, path, resp.StatusCode, p.Detail)
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s: %w", path, err)
		}
	}
	return resp.StatusCode, nil
}

// backoff is the wait before try number try+1 of a request: 10ms doubling
// up to 1s, with equal jitter (half of it, plus a random part of the other
// half) so that workers failing together do not try again together. The
// client module imports nothing of the server, so this is its own small
// copy of the server's internal/backoff.
func backoff(try int) time.Duration {
	return jitter(min(10*time.Millisecond<<min(try, 7), time.Second), rand.Int64N)
}

// jitter spreads d over [d/2, d) with rnd, a random number in [0, n).
func jitter(d time.Duration, rnd func(n int64) int64) time.Duration {
	half := d / 2
	return half + time.Duration(rnd(int64(d-half)))
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
