// Workers over HTTP: the documents of the worker protocol (API.md, "Workers
// over HTTP"): register, poll, report, heartbeat, drain.
package wire

import "encoding/json"

// WorkerRegister is the body of POST /api/v1/workers/register.
type WorkerRegister struct {
	Name    string   `json:"name"`
	Runners []string `json:"runners"`
	Slots   int      `json:"slots"`
}

// WorkerSession answers a registration: the incarnation it started and the
// session (a bearer secret) every later call of that incarnation presents.
// The session ends with the incarnation (lost, drained, replaced).
type WorkerSession struct {
	Name         string  `json:"name"`
	Incarnation  string  `json:"incarnation"`
	Session      string  `json:"session"`
	LeaseSeconds float64 `json:"lease_seconds"`
}

// WorkerPoll is the body of POST /api/v1/workers/{name}/poll: at most Max
// assignments (omitted: the incarnation's slots; 0: none, only cancels),
// waiting at most WaitSeconds (default 20, at most 60) for something new.
// With Start, the server records every assignment it returns as running
// (as the worker's running report would) and leaves out those it may not
// start: the worker runs them at once and reports only their end.
type WorkerPoll struct {
	Max         int     `json:"max"`
	WaitSeconds float64 `json:"wait_seconds,omitempty"`
	Start       bool    `json:"start,omitempty"`
}

// Assignment is one execution handed to the polling incarnation.
type Assignment struct {
	Execution    string          `json:"execution"`
	Action       string          `json:"action"`
	Runner       string          `json:"runner"`
	Input        json.RawMessage `json:"input,omitempty"`
	RunnerConfig json.RawMessage `json:"runner_config,omitempty"`
	KeyField     string          `json:"key_field,omitempty"` // the action's concurrency_key: an input field the runner should ignore
	// ResourceKeyFields are the key_fields of the keyed resources the
	// action needs: input fields the runner should ignore too.
	ResourceKeyFields []string `json:"resource_key_fields,omitempty"`
	Attempt           int      `json:"attempt"`
	TimeoutSeconds    float64  `json:"timeout_seconds"`
	// Traceparent is the W3C trace context the execution was requested in
	// (omitted: none): the worker starts the run's span as its child.
	Traceparent string `json:"traceparent,omitempty"`
}

// WorkerPollResult answers a poll: new assignments (and those handed
// before that the worker has not reported on yet), and the executions whose
// runs it must stop (a client asked to cancel them, or they were taken back).
type WorkerPollResult struct {
	Assignments []Assignment `json:"assignments"`
	Cancels     []string     `json:"cancels"`
}

// Report statuses.
const (
	ReportRunning   = "running"
	ReportCompleted = "completed"
	ReportFailed    = "failed"
	ReportTimedOut  = "timed_out"
	ReportCancelled = "cancelled"
)

// WorkerReport says how a run of an assignment went. Attempt, when set,
// must be the assignment's: a late report of an earlier attempt is refused.
type WorkerReport struct {
	Execution string          `json:"execution"`
	Attempt   int             `json:"attempt,omitempty"`
	Status    string          `json:"status"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     string          `json:"error,omitempty"`
}

// WorkerReports is the body of a report call that sends several.
type WorkerReports struct {
	Reports []WorkerReport `json:"reports"`
}

// WorkerReportResult answers one report. In a batch's results a refused
// report carries its Problem (and the others still count).
type WorkerReportResult struct {
	Execution string   `json:"execution"`
	Status    string   `json:"status"`
	Problem   *Problem `json:"problem,omitempty"`
}

// WorkerReportResults answers a batch: one result per report, in order.
type WorkerReportResults struct {
	Results []WorkerReportResult `json:"results"`
}
