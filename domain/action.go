package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"time"
)

// Limits on a policy's values.
const (
	MaxRefLen           = 100
	MaxConcurrentLimit  = 100_000
	MaxQueueLengthLimit = 10_000_000
	MaxTimeoutSeconds   = 7 * 24 * 3600
	MaxAttemptsLimit    = 100
	// MaxRunnerConfigLen bounds a policy's runner_config, in bytes of
	// compact JSON.
	MaxRunnerConfigLen = 64 << 10
)

// Policy defaults, applied by Policy.WithDefaults to fields left at zero.
const (
	DefaultMaxConcurrent        = 1
	DefaultMaxQueueLength       = 10_000
	DefaultTimeoutSeconds       = 3600
	DefaultScheduledTimeoutSecs = 300
	DefaultMaxAttempts          = 3
)

// On-limit behaviours: what a request does when the queue is full or the rate
// limit is reached.
const (
	OnLimitQueue  = "queue"  // wait (rate limit: wait for the window; queue full: still rejected)
	OnLimitReject = "reject" // reject at once when no slot is free right now
	// OnLimitCancelInProgress: a request that finds its key value's slots
	// taken waits, and the executor asks the oldest running execution of
	// that value to cancel (execution.cancel_requested by the executor);
	// the slot it frees goes to the waiter as any free slot does.
	OnLimitCancelInProgress = "cancel_in_progress"
)

var refPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]*$`)

// RateLimit allows Count grants per PerSeconds window.
type RateLimit struct {
	Count      int     `json:"count"`
	PerSeconds float64 `json:"per_seconds"`
}

// Policy is an action's definition: its runner and its concurrency policy.
// Zero values mean "default" (see WithDefaults); Validate checks ranges.
type Policy struct {
	Ref                     string     `json:"ref"`
	Runner                  string     `json:"runner"`
	MaxConcurrent           int        `json:"max_concurrent,omitempty"`
	MaxQueueLength          int        `json:"max_queue_length,omitempty"`
	QueueTimeoutSeconds     float64    `json:"queue_timeout_seconds,omitempty"` // 0: wait forever
	TimeoutSeconds          float64    `json:"timeout_seconds,omitempty"`
	ScheduledTimeoutSeconds float64    `json:"scheduled_timeout_seconds,omitempty"`
	MaxAttempts             int        `json:"max_attempts,omitempty"`
	RateLimit               *RateLimit `json:"rate_limit,omitempty"`
	ConcurrencyKey          string     `json:"concurrency_key,omitempty"`
	OnLimit                 string     `json:"on_limit,omitempty"`
	// MaxConcurrentTotal bounds the executions running across all values
	// of ConcurrencyKey (MaxConcurrent stays the limit of each value); a
	// free slot goes to the key values with eligible waiters in turn
	// (round robin, see Queue.Grantable). 0: no total limit.
	MaxConcurrentTotal int `json:"max_concurrent_total,omitempty"`
	// RunnerConfig is the runner's own configuration, fixed by whoever
	// defines the action and handed to the runner with every run, next to
	// the input: what core.shell runs, what core.http may reach. A request's
	// input can never change it. nil or a JSON object (compact once
	// WithDefaults has run); what it may hold is the runner's to say.
	RunnerConfig json.RawMessage `json:"runner_config,omitempty"`
	// Retry runs a failed or timed-out run again (see RetryPolicy); nil:
	// a failed run is final.
	Retry *RetryPolicy `json:"retry,omitempty"`
	// Resources are the named resources every execution of the action
	// holds while it holds its slot (resource.go); nil: none, and the
	// grant costs nothing more.
	Resources []ResourceNeed `json:"resources,omitempty" snapshot:"added"`
}

// ErrInvalidPolicy is wrapped by every policy validation error.
var ErrInvalidPolicy = errors.New("invalid policy")

// ValidateRef checks an action ref: 1..MaxRefLen of letters, digits, '_', '.', '-'.
func ValidateRef(ref string) error {
	if ref == "" || len(ref) > MaxRefLen || !refPattern.MatchString(ref) {
		return fmt.Errorf("%w: ref %q must be 1..%d letters, digits, '_', '.' or '-', starting with a letter or digit", ErrInvalidPolicy, clip(ref), MaxRefLen)
	}
	return nil
}

// WithDefaults returns p with zero fields set to their defaults.
func (p Policy) WithDefaults() Policy {
	if p.MaxConcurrent == 0 {
		p.MaxConcurrent = DefaultMaxConcurrent
	}
	if p.MaxQueueLength == 0 {
		p.MaxQueueLength = DefaultMaxQueueLength
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = DefaultTimeoutSeconds
	}
	if p.ScheduledTimeoutSeconds == 0 {
		p.ScheduledTimeoutSeconds = DefaultScheduledTimeoutSecs
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.OnLimit == "" {
		p.OnLimit = OnLimitQueue
	}
	p.RunnerConfig = compactConfig(p.RunnerConfig)
	if p.Retry != nil {
		r := p.Retry.withDefaults()
		p.Retry = &r
	}
	if len(p.Resources) == 0 {
		p.Resources = nil
	} else {
		p.Resources = append([]ResourceNeed(nil), p.Resources...)
		for i := range p.Resources {
			if p.Resources[i].Units == 0 {
				p.Resources[i].Units = 1
			}
		}
	}
	return p
}

// compactConfig returns c in the one form the log keeps it in (compact
// JSON, object keys sorted, nil for absent or null), so a policy compares
// equal to itself read back from the log and to the same config written
// with other white space or key order. Numbers keep their text. Invalid
// JSON is returned as is, for Validate to refuse.
func compactConfig(c json.RawMessage) json.RawMessage {
	t := bytes.TrimSpace(c)
	if len(t) == 0 || string(t) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return c
	}
	b, err := json.Marshal(v)
	if err != nil {
		return c
	}
	return b
}

// Validate checks every field's range. It expects defaults applied.
func (p Policy) Validate() error {
	if err := ValidateRef(p.Ref); err != nil {
		return err
	}
	if p.Runner == "" || len(p.Runner) > MaxRefLen || !refPattern.MatchString(p.Runner) {
		return fmt.Errorf("%w: runner %q must be 1..%d letters, digits, '_', '.' or '-'", ErrInvalidPolicy, clip(p.Runner), MaxRefLen)
	}
	if p.MaxConcurrent < 1 || p.MaxConcurrent > MaxConcurrentLimit {
		return fmt.Errorf("%w: max_concurrent %d must be 1..%d", ErrInvalidPolicy, p.MaxConcurrent, MaxConcurrentLimit)
	}
	if p.MaxQueueLength < 1 || p.MaxQueueLength > MaxQueueLengthLimit {
		return fmt.Errorf("%w: max_queue_length %d must be 1..%d", ErrInvalidPolicy, p.MaxQueueLength, MaxQueueLengthLimit)
	}
	for _, s := range []struct {
		name string
		v    float64
		zero bool
	}{
		{"queue_timeout_seconds", p.QueueTimeoutSeconds, true},
		{"timeout_seconds", p.TimeoutSeconds, false},
		{"scheduled_timeout_seconds", p.ScheduledTimeoutSeconds, false},
	} {
		if math.IsNaN(s.v) || s.v < 0 || s.v > MaxTimeoutSeconds || (!s.zero && s.v == 0) {
			return fmt.Errorf("%w: %s %v must be in (0, %d]", ErrInvalidPolicy, s.name, s.v, MaxTimeoutSeconds)
		}
	}
	if p.MaxAttempts < 1 || p.MaxAttempts > MaxAttemptsLimit {
		return fmt.Errorf("%w: max_attempts %d must be 1..%d", ErrInvalidPolicy, p.MaxAttempts, MaxAttemptsLimit)
	}
	if rl := p.RateLimit; rl != nil {
		if rl.Count < 1 || rl.Count > 1_000_000 || math.IsNaN(rl.PerSeconds) || rl.PerSeconds <= 0 || rl.PerSeconds > 86400 {
			return fmt.Errorf("%w: rate_limit needs count 1..1000000 and per_seconds in (0, 86400]", ErrInvalidPolicy)
		}
	}
	if len(p.ConcurrencyKey) > MaxRefLen {
		return fmt.Errorf("%w: concurrency_key longer than %d bytes", ErrInvalidPolicy, MaxRefLen)
	}
	if p.MaxConcurrentTotal != 0 {
		if p.ConcurrencyKey == "" {
			return fmt.Errorf("%w: max_concurrent_total needs a concurrency_key", ErrInvalidPolicy)
		}
		if p.MaxConcurrentTotal < 1 || p.MaxConcurrentTotal > MaxConcurrentLimit {
			return fmt.Errorf("%w: max_concurrent_total %d must be 1..%d", ErrInvalidPolicy, p.MaxConcurrentTotal, MaxConcurrentLimit)
		}
	}
	if p.OnLimit != OnLimitQueue && p.OnLimit != OnLimitReject && p.OnLimit != OnLimitCancelInProgress {
		return fmt.Errorf("%w: on_limit %q must be %q, %q or %q", ErrInvalidPolicy, clip(p.OnLimit), OnLimitQueue, OnLimitReject, OnLimitCancelInProgress)
	}
	if p.Retry != nil {
		if err := p.Retry.validate(); err != nil {
			return err
		}
	}
	if err := validateNeeds(p.Resources); err != nil {
		return err
	}
	if c := p.RunnerConfig; c != nil {
		if t := bytes.TrimSpace(c); len(t) == 0 || t[0] != '{' || !json.Valid(t) {
			return fmt.Errorf("%w: runner_config must be a JSON object", ErrInvalidPolicy)
		}
		if len(c) > MaxRunnerConfigLen {
			return fmt.Errorf("%w: runner_config longer than %d bytes", ErrInvalidPolicy, MaxRunnerConfigLen)
		}
	}
	return nil
}

// MaxKeyLen bounds a concurrency key value, in bytes.
const MaxKeyLen = 200

// KeyOf returns the concurrency key of an execution with input in: "" when
// the policy names no concurrency_key; otherwise the value of the input's
// top-level field of that name: a string as is, a number or a boolean as its
// JSON text. A missing or null field, an object or array value, or a value
// longer than MaxKeyLen is an error wrapping ErrInvalidRequest: the request is
// rejected with RejectInvalidInput.
func (p Policy) KeyOf(in json.RawMessage) (string, error) {
	if p.ConcurrencyKey == "" {
		return "", nil
	}
	var fields map[string]json.RawMessage
	if t := bytes.TrimSpace(in); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		if err := json.Unmarshal(t, &fields); err != nil {
			return "", fmt.Errorf("%w: input: %w", ErrInvalidRequest, err)
		}
	}
	raw, ok := fields[p.ConcurrencyKey]
	raw = bytes.TrimSpace(raw)
	if !ok || len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", fmt.Errorf("%w: input has no field %q, the action's concurrency_key", ErrInvalidRequest, p.ConcurrencyKey)
	}
	var key string
	switch raw[0] {
	case '"':
		if err := json.Unmarshal(raw, &key); err != nil {
			return "", fmt.Errorf("%w: field %q: %w", ErrInvalidRequest, p.ConcurrencyKey, err)
		}
	case '{', '[':
		return "", fmt.Errorf("%w: field %q, the action's concurrency_key, must be a string, number or boolean", ErrInvalidRequest, p.ConcurrencyKey)
	default:
		key = string(raw)
	}
	if len(key) > MaxKeyLen {
		return "", fmt.Errorf("%w: field %q is longer than %d bytes", ErrInvalidRequest, p.ConcurrencyKey, MaxKeyLen)
	}
	return key, nil
}

// RateWindow returns the rate limit's window (0 without a rate limit).
func (p Policy) RateWindow() time.Duration {
	if p.RateLimit == nil {
		return 0
	}
	return seconds(p.RateLimit.PerSeconds)
}

// Timeout, ScheduledTimeout and QueueTimeout return the policy's durations.
func (p Policy) Timeout() time.Duration          { return seconds(p.TimeoutSeconds) }
func (p Policy) ScheduledTimeout() time.Duration { return seconds(p.ScheduledTimeoutSeconds) }
func (p Policy) QueueTimeout() time.Duration     { return seconds(p.QueueTimeoutSeconds) }

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ErrConflict is returned when a command contradicts what already exists
// (an action defined again with a different policy).
var ErrConflict = errors.New("conflict")

// ErrNotFound is returned when a command names something that does not exist.
var ErrNotFound = errors.New("not found")

// Action is the aggregate of one action-<ref> stream.
type Action struct {
	policy  Policy
	defined bool
	paused  bool
	version int64 // last applied stream version; -1 when the stream is empty
}

// NewAction returns the state of an action stream with no events.
func NewAction() *Action { return &Action{version: -1} }

// Defined reports whether the action exists.
func (a *Action) Defined() bool { return a.defined }

// Policy returns the current policy.
func (a *Action) Policy() Policy { return a.policy }

// Paused reports whether grants are stopped.
func (a *Action) Paused() bool { return a.paused }

// Version returns the last applied stream version, -1 for none.
func (a *Action) Version() int64 { return a.version }

// Define decides the definition of an action. It returns the event to append,
// or nil when the same policy is already defined (an idempotent repeat), or an
// error wrapping ErrConflict when a different policy exists, or ErrInvalidPolicy.
func (a *Action) Define(p Policy) (Event, error) {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if a.defined {
		if reflect.DeepEqual(a.policy, p) {
			return nil, nil
		}
		return nil, fmt.Errorf("action %q exists with a different policy: %w", p.Ref, ErrConflict)
	}
	return ActionDefined{Policy: p}, nil
}

// ChangePolicy decides a policy change; nil when nothing changes.
func (a *Action) ChangePolicy(p Policy) (Event, error) {
	if !a.defined {
		return nil, fmt.Errorf("action %q: %w", p.Ref, ErrNotFound)
	}
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Ref != a.policy.Ref {
		return nil, fmt.Errorf("%w: ref %q cannot change to %q", ErrInvalidPolicy, a.policy.Ref, p.Ref)
	}
	if reflect.DeepEqual(a.policy, p) {
		return nil, nil
	}
	return ActionPolicyChanged{Policy: p}, nil
}

// Pause decides a pause; nil when already paused.
func (a *Action) Pause(reason string) (Event, error) {
	if !a.defined {
		return nil, fmt.Errorf("pause: %w", ErrNotFound)
	}
	if a.paused {
		return nil, nil
	}
	return ActionPaused{Reason: reason}, nil
}

// Resume decides a resume; nil when not paused.
func (a *Action) Resume() (Event, error) {
	if !a.defined {
		return nil, fmt.Errorf("resume: %w", ErrNotFound)
	}
	if !a.paused {
		return nil, nil
	}
	return ActionResumed{}, nil
}

// Apply folds one event of the action stream. It never validates.
func (a *Action) Apply(ev Event, version uint64) {
	switch e := ev.(type) {
	case ActionDefined:
		a.policy, a.defined = e.Policy, true
	case ActionPolicyChanged:
		a.policy = e.Policy
	case ActionPaused:
		a.paused = true
	case ActionResumed:
		a.paused = false
	}
	a.version = int64(version)
}

func clip(s string) string { return clipUTF8(s, 64) }
