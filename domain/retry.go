package domain

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Retries: a run that fails or times out is run again, up to
// RetryPolicy.MaxAttempts runs in all, after an exponential backoff judged
// by log time. In the log:
//
//	running ─ execution.run_failed (the worker) ─▶ scheduling (the executor owns it, the slot still held)
//	        ─ execution.retry_scheduled (the executor) ─▶ requested, backing off: no slot, no place in the FIFO yet
//	        ─ execution.requeued (the executor, at or after the backoff's end) ─▶ waits in its queue again, at the back
//
// The last run ends as a run without retries does (execution.failed or
// execution.timed_out by its worker).

// Event types of retries.
const (
	TypeExecutionRunFailed      = "execution.run_failed"
	TypeExecutionRetryScheduled = "execution.retry_scheduled"
	TypeExecutionRequeued       = "execution.requeued"
)

// TakenBackRunFailed is Execution.TakenBack after execution.run_failed.
const TakenBackRunFailed = "run_failed"

// Limits and defaults of a retry policy.
const (
	MaxBackoffSecondsLimit   = 7 * 24 * 3600
	MaxBackoffMultiplier     = 100
	DefaultBackoffSeconds    = 1
	DefaultBackoffMultiplier = 2
	DefaultMaxBackoffSeconds = 300
)

// RetryPolicy says how often and when a failed or timed-out run is run
// again. After the failed run number n (1 for the first) the execution
// backs off min(BackoffSeconds × BackoffMultiplier^(n-1), MaxBackoffSeconds).
type RetryPolicy struct {
	MaxAttempts       int     `json:"max_attempts"`                  // runs in all, 1..MaxAttemptsLimit
	BackoffSeconds    float64 `json:"backoff_seconds,omitempty"`     // 0..MaxBackoffSecondsLimit (default 1; set with a multiplier for 0)
	BackoffMultiplier float64 `json:"backoff_multiplier,omitempty"`  // 1..MaxBackoffMultiplier (default 2)
	MaxBackoffSeconds float64 `json:"max_backoff_seconds,omitempty"` // BackoffSeconds..MaxBackoffSecondsLimit (default 300, or BackoffSeconds if larger)
}

// withDefaults fills the zero fields.
func (r RetryPolicy) withDefaults() RetryPolicy {
	if r.BackoffSeconds == 0 && r.BackoffMultiplier == 0 && r.MaxBackoffSeconds == 0 {
		r.BackoffSeconds = DefaultBackoffSeconds
	}
	if r.BackoffMultiplier == 0 {
		r.BackoffMultiplier = DefaultBackoffMultiplier
	}
	if r.MaxBackoffSeconds == 0 {
		r.MaxBackoffSeconds = max(DefaultMaxBackoffSeconds, r.BackoffSeconds)
	}
	return r
}

func (r RetryPolicy) validate() error {
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }
	switch {
	case r.MaxAttempts < 1 || r.MaxAttempts > MaxAttemptsLimit:
		return fmt.Errorf("%w: retry.max_attempts %d must be 1..%d", ErrInvalidPolicy, r.MaxAttempts, MaxAttemptsLimit)
	case bad(r.BackoffSeconds) || r.BackoffSeconds < 0 || r.BackoffSeconds > MaxBackoffSecondsLimit:
		return fmt.Errorf("%w: retry.backoff_seconds %v must be in [0, %d]", ErrInvalidPolicy, r.BackoffSeconds, MaxBackoffSecondsLimit)
	case bad(r.BackoffMultiplier) || r.BackoffMultiplier < 1 || r.BackoffMultiplier > MaxBackoffMultiplier:
		return fmt.Errorf("%w: retry.backoff_multiplier %v must be in [1, %d]", ErrInvalidPolicy, r.BackoffMultiplier, MaxBackoffMultiplier)
	case bad(r.MaxBackoffSeconds) || r.MaxBackoffSeconds < r.BackoffSeconds || r.MaxBackoffSeconds > MaxBackoffSecondsLimit:
		return fmt.Errorf("%w: retry.max_backoff_seconds %v must be in [backoff_seconds %v, %d]", ErrInvalidPolicy,
			r.MaxBackoffSeconds, r.BackoffSeconds, MaxBackoffSecondsLimit)
	}
	return nil
}

// Backoff returns how long an execution backs off after its failed run
// number run (1 for the first): min(BackoffSeconds ×
// BackoffMultiplier^(run-1), MaxBackoffSeconds), to the millisecond.
func (r RetryPolicy) Backoff(run int) time.Duration {
	s := r.BackoffSeconds * math.Pow(r.BackoffMultiplier, float64(max(run-1, 0)))
	if math.IsNaN(s) || s > r.MaxBackoffSeconds {
		s = r.MaxBackoffSeconds
	}
	return time.Duration(math.Round(s*1000)) * time.Millisecond
}

// Runs returns how many runs the policy allows in all: its retry's
// max_attempts, 1 without one.
func (p Policy) Runs() int {
	if p.Retry == nil {
		return 1
	}
	return p.Retry.MaxAttempts
}

// HandoffLimit returns how many handoffs an execution may have in all:
// max_attempts (handoff expiries and lost workers) or, when larger, the
// retry's max_attempts (runs); 0 (no limit) when max_attempts is unset.
func (p Policy) HandoffLimit() int {
	if p.MaxAttempts <= 0 {
		return 0
	}
	return max(p.MaxAttempts, p.Runs())
}

// ExecutionRunFailed is a run's failure or timeout, by its worker, when the
// handoff allows another run: the executor takes the execution back
// (scheduling, the slot still held) to back off and run it again.
type ExecutionRunFailed struct {
	Worker        string          `json:"worker"`
	Attempt       int             `json:"attempt"`
	Error         string          `json:"error"`
	Code          string          `json:"code,omitempty"`
	Result        json.RawMessage `json:"result,omitempty"`
	TimedOut      bool            `json:"timed_out,omitempty"`
	TimeoutMillis int64           `json:"timeout_ms,omitempty"`
}

// ExecutionRetryScheduled is the executor taking back a failed run: the
// slot is released and the execution backs off for BackoffMillis from this
// event's log time, holding no slot, before it waits in its queue again.
type ExecutionRetryScheduled struct {
	Attempt        int    `json:"attempt"` // the failed run's
	BackoffMillis  int64  `json:"backoff_ms"`
	Action         string `json:"action"`
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
}

// ExecutionRequeued ends a backoff: the execution waits in its queue again,
// behind every waiter requested before this event (its place in the FIFO
// is this event's position). Written at or after the backoff's end.
type ExecutionRequeued struct {
	Action         string `json:"action"`
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	Priority       int    `json:"priority,omitempty"` // the request's (0: DefaultPriority)
}

func (ExecutionRunFailed) EventType() string      { return TypeExecutionRunFailed }
func (ExecutionRetryScheduled) EventType() string { return TypeExecutionRetryScheduled }
func (ExecutionRequeued) EventType() string       { return TypeExecutionRequeued }

// RetryOr turns a worker's decided end of a run into execution.run_failed
// when the handoff allows another run: ev is the execution.failed or
// execution.timed_out the worker decided (err its refusal, returned as is),
// and the current attempt is below the handoff's runs, and no cancellation
// was asked. Any other event is returned unchanged.
func (x *Execution) RetryOr(ev Event, err error) (Event, error) {
	if err != nil || x.attempt >= x.runs || x.cancelRequested {
		return ev, err
	}
	rf := ExecutionRunFailed{Worker: x.worker, Attempt: x.attempt}
	switch e := ev.(type) {
	case ExecutionFailed:
		rf.Error, rf.Code, rf.Result = e.Error, e.Code, e.Result
	case ExecutionTimedOut:
		rf.TimedOut, rf.TimeoutMillis, rf.Result = true, e.TimeoutMillis, e.Result
		rf.Error = fmt.Sprintf("timed out after %s", time.Duration(e.TimeoutMillis)*time.Millisecond)
	default:
		return ev, err
	}
	return rf, x.Check(TypeExecutionRunFailed, OwnerWorker, x.worker)
}

// ScheduleRetry decides taking back a failed run under policy p: the
// backoff after it. It fails with ErrAttemptsExhausted when p allows no
// further handoff (the executor then ends the execution with the run's
// error).
func (x *Execution) ScheduleRetry(p Policy) (ExecutionRetryScheduled, error) {
	ev := ExecutionRetryScheduled{Attempt: x.attempt, Action: x.action, ConcurrencyKey: x.key}
	if err := x.Check(TypeExecutionRetryScheduled, OwnerExecutor, ""); err != nil {
		return ev, err
	}
	if x.takenBack != TakenBackRunFailed {
		return ev, fmt.Errorf("%w: execution %s has no failed run to retry", ErrInvalidRequest, x.id)
	}
	if limit := p.HandoffLimit(); (limit > 0 && x.attempt >= limit) || x.attempt >= p.Runs() {
		return ev, fmt.Errorf("execution %s after %d runs: %w", x.id, x.attempt, ErrAttemptsExhausted)
	}
	if p.Retry != nil {
		ev.BackoffMillis = p.Retry.Backoff(x.attempt).Milliseconds()
	}
	return ev, nil
}

// FailRun decides the executor's end of a failed run that may not be run
// again (the policy changed meanwhile): execution.failed with the run's
// error, code and result.
func (x *Execution) FailRun() (ExecutionFailed, error) {
	ev, err := x.Fail(OwnerExecutor, "", x.errMsg, x.result)
	ev.Code = x.code
	return ev, err
}

// Requeue decides the end of a deferral at log time now: the execution
// waits in the queue of key value key from then on. After a failed run
// that is its key (the grant's); a request not due yet has had no grant,
// and the caller derives key from its input (Policy.KeyOf).
func (x *Execution) Requeue(now time.Time, key string) (ExecutionRequeued, error) {
	ev := ExecutionRequeued{Action: x.action, ConcurrencyKey: key, Priority: x.priority}
	if x.takenBack == TakenBackRunFailed {
		ev.ConcurrencyKey = x.key
	}
	if err := x.Check(TypeExecutionRequeued, OwnerExecutor, ""); err != nil {
		return ev, err
	}
	if x.deferredUntil.IsZero() {
		return ev, fmt.Errorf("%w: execution %s is neither backing off nor delayed", ErrInvalidRequest, x.id)
	}
	if now.Before(x.deferredUntil) {
		return ev, fmt.Errorf("execution %s backs off until %s: %w", x.id, x.deferredUntil.Format(time.RFC3339Nano), ErrHandoffNotExpired)
	}
	return ev, nil
}

// Deferred reports whether the execution waits in no FIFO until a log
// time, and until when: it backs off after a failed run, or its request
// is not due yet (run_at, delay_seconds).
func (x *Execution) Deferred() (until time.Time, ok bool) {
	return x.deferredUntil, !x.deferredUntil.IsZero()
}

// Runs returns how many runs the current handoff allows in all (the
// policy's retry.max_attempts at the grant; 1 without retries).
func (x *Execution) Runs() int { return max(x.runs, 1) }

// validateRetry checks the payload of a retry event against the state: the
// audit's part of Validate.
func (x *Execution) validateRetry(ev Event) string {
	switch e := ev.(type) {
	case ExecutionRunFailed:
		if e.Worker != x.worker || e.Attempt != x.attempt {
			return fmt.Sprintf("run_failed names worker %q attempt %d, the handoff is %q attempt %d", e.Worker, e.Attempt, x.worker, x.attempt)
		}
		if x.attempt >= x.Runs() {
			return fmt.Sprintf("run_failed of attempt %d, but the handoff allows %d runs: it must end the execution", x.attempt, x.Runs())
		}
	case ExecutionRetryScheduled:
		if x.takenBack != TakenBackRunFailed || e.Attempt != x.attempt {
			return fmt.Sprintf("retry_scheduled of attempt %d, but attempt %d has no failed run (taken back: %q)", e.Attempt, x.attempt, x.takenBack)
		}
		if e.BackoffMillis < 0 || e.Action != x.action || e.ConcurrencyKey != x.key {
			return fmt.Sprintf("retry_scheduled names action %q key %q backoff %dms; the execution is %q key %q",
				e.Action, e.ConcurrencyKey, e.BackoffMillis, x.action, x.key)
		}
	case ExecutionRequeued:
		if x.deferredUntil.IsZero() {
			return "requeued, but it is neither backing off nor delayed"
		}
		if e.Action != x.action || (x.takenBack == TakenBackRunFailed && e.ConcurrencyKey != x.key) || PriorityOf(e.Priority) != x.Priority() {
			return fmt.Sprintf("requeued names action %q key %q priority %d; the execution is %q key %q priority %d",
				e.Action, e.ConcurrencyKey, PriorityOf(e.Priority), x.action, x.key, x.Priority())
		}
	}
	return ""
}

// runsOf is what a handoff under p records as its runs: 0 (omitted) for 1.
func runsOf(p Policy) int {
	if n := p.Runs(); n > 1 {
		return n
	}
	return 0
}
