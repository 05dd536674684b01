package domain

import (
	"fmt"
	"math"
	"time"
)

// Priorities and delays of a request.
//
// Priority 1..4 (1 first; 0 in an event means DefaultPriority): in one
// queue (one action, one concurrency-key value) a waiter is granted before
// every waiter of a lower priority (a larger number), and in request order
// within one priority.
//
// A request with run_at (a time) or delay_seconds (from the log time of its
// execution.requested) later than its request is admitted (or rejected) at
// its position as any other, but waits in no FIFO until it is due: at or
// after that time, by log time, the executor writes execution.requeued and
// it waits in its queue from then on, behind the waiters already there.
const (
	MinPriority     = 1
	MaxPriority     = 4
	DefaultPriority = 2
	// MaxDelaySeconds bounds delay_seconds, and how far beyond the
	// request's time run_at may be.
	MaxDelaySeconds = 366 * 24 * 3600
)

// PriorityOf returns the priority an event's value p means: DefaultPriority
// for 0.
func PriorityOf(p int) int {
	if p == 0 {
		return DefaultPriority
	}
	return p
}

// validateTiming checks a request's priority and delay.
func (r ExecutionRequested) validateTiming() error {
	switch {
	case r.Priority != 0 && (r.Priority < MinPriority || r.Priority > MaxPriority):
		return fmt.Errorf("%w: priority %d must be %d..%d (1 first)", ErrInvalidRequest, r.Priority, MinPriority, MaxPriority)
	case r.DelayMillis < 0 || r.DelayMillis > MaxDelaySeconds*1000:
		return fmt.Errorf("%w: delay_seconds %g must be in [0, %d]", ErrInvalidRequest, float64(r.DelayMillis)/1000, MaxDelaySeconds)
	case r.RunAt != "" && r.DelayMillis != 0:
		return fmt.Errorf("%w: give run_at or delay_seconds, not both", ErrInvalidRequest)
	case r.RunAt != "" && !validRunAt(r.RunAt):
		return fmt.Errorf("%w: run_at %q is not an RFC 3339 time (such as 2026-01-02T15:04:05Z)", ErrInvalidRequest, clip(r.RunAt))
	case (r.Priority != 0 || r.RunAt != "" || r.DelayMillis != 0) && (r.Items > 0 || len(r.WithItems) > 0 || r.Parent != ""):
		return fmt.Errorf("%w: priority, run_at and delay_seconds apply to plain requests, not to with_items", ErrInvalidRequest)
	}
	return nil
}

// validRunAt reports whether s is an RFC 3339 time between years 1 and 9999.
func validRunAt(s string) bool {
	t, err := time.Parse(time.RFC3339Nano, s)
	return err == nil && !t.IsZero()
}

// FormatRunAt is the form a request's run_at takes in its event.
func FormatRunAt(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// DelayMillisOf converts delay_seconds to the event's milliseconds,
// refusing what is not a finite number in [0, MaxDelaySeconds].
func DelayMillisOf(seconds float64) (int64, error) {
	if math.IsNaN(seconds) || math.IsInf(seconds, 0) || seconds < 0 || seconds > MaxDelaySeconds {
		return 0, fmt.Errorf("%w: delay_seconds %v must be in [0, %d]", ErrInvalidRequest, seconds, MaxDelaySeconds)
	}
	return int64(math.Round(seconds * 1000)), nil
}

// Due returns when a request committed at log time at becomes eligible:
// zero when it is eligible at once (no run_at or delay, or one not later
// than at).
func (r ExecutionRequested) Due(at time.Time) time.Time {
	var due time.Time
	if r.RunAt != "" {
		due, _ = time.Parse(time.RFC3339Nano, r.RunAt) // (validated at the request; a bad one: due at once)
	}
	if r.DelayMillis > 0 {
		due = at.Add(time.Duration(r.DelayMillis) * time.Millisecond)
	}
	if !due.After(at) {
		return time.Time{}
	}
	return due
}

// Priority returns the execution's priority (1..4).
func (x *Execution) Priority() int { return PriorityOf(x.priority) }
