package remote

import "encoding/json"

// The protocol's documents as this package takes and gives them; the API
// converts them from and to client/wire's (same fields).

// Registration asks for a new incarnation of worker Name.
type Registration struct {
	Name    string
	Runners []string
	Slots   int
	By      string // the principal registering (the token's name), for Config.MaxNames
}

// Opened is a registration's answer: the session secret, shown once.
type Opened struct {
	Name         string
	Incarnation  string
	Session      string
	LeaseSeconds float64
}

// Assignment is an execution handed to a session's incarnation.
type Assignment struct {
	Execution    string
	Action       string
	Runner       string
	Input        json.RawMessage
	RunnerConfig json.RawMessage
	KeyField     string // the action's concurrency_key: the input field the runner leaves to turnstile
	// ResourceKeyFields are the key_fields of the keyed resources the action
	// needs: input fields the runner leaves to turnstile too.
	ResourceKeyFields []string
	Attempt           int
	TimeoutSeconds    float64
	Traceparent       string // the request's W3C trace context, or ""
}

// PollResult is a poll's answer.
type PollResult struct {
	Assignments []Assignment
	Cancels     []string
}

// Report statuses.
const (
	ReportRunning   = "running"
	ReportCompleted = "completed"
	ReportFailed    = "failed"
	ReportTimedOut  = "timed_out"
	ReportCancelled = "cancelled"
)

// Report says how a run went.
type Report struct {
	Execution string
	Attempt   int
	Status    string
	Result    json.RawMessage
	Error     string
}

// ReportResult is a report's answer.
type ReportResult struct {
	Execution string
	Status    string
}
