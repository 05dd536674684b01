// Actions: the policy a client defines or changes, and the action as the
// API shows it.
package wire

import "encoding/json"

// RateLimit allows Count grants per PerSeconds seconds.
type RateLimit struct {
	Count      int     `json:"count"`
	PerSeconds float64 `json:"per_seconds"`
}

// Policy is an action's definition: the body of POST /api/v1/actions and
// PUT /api/v1/actions/{ref}/policy. Zero fields take the server's defaults.
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
	// MaxConcurrentTotal bounds the running executions across all values of
	// ConcurrencyKey (which it needs), granted to the values in turn.
	MaxConcurrentTotal int `json:"max_concurrent_total,omitempty"`
	// RunnerConfig is the runner's own configuration, a JSON object fixed
	// by the definition and handed to the runner with every run: what
	// core.shell runs ({"command": "/usr/bin/convert", "args": [...],
	// "env": {...}, "dir": "/abs", "input_args": true}), what core.http
	// reaches ({"url": "https://api.example.com/v1/", "methods": ["GET"],
	// "allow_private": false}). Every reader of the action sees it: it is
	// no place for secrets.
	RunnerConfig json.RawMessage `json:"runner_config,omitempty"`
	// Retry runs a failed or timed-out run again, up to MaxAttempts runs
	// in all, after an exponential backoff; absent: a failed run is final.
	Retry *Retry `json:"retry,omitempty"`
	// Resources are the named resources every execution holds while it
	// holds its slot: ["stripe",{"name":"gpu","units":2}].
	Resources []ResourceNeed `json:"resources,omitempty"`
}

// Retry is an action's retry policy: after failed run n (1 for the first)
// the execution backs off min(BackoffSeconds × BackoffMultiplier^(n-1),
// MaxBackoffSeconds), holding no slot, then waits in its queue again.
// Zero fields take the server's defaults (1 s, × 2, at most 300 s).
type Retry struct {
	MaxAttempts       int     `json:"max_attempts"`
	BackoffSeconds    float64 `json:"backoff_seconds,omitempty"`
	BackoffMultiplier float64 `json:"backoff_multiplier,omitempty"`
	MaxBackoffSeconds float64 `json:"max_backoff_seconds,omitempty"`
}

// Action is an action's policy in force (defaults filled in) and state.
type Action struct {
	Policy
	Paused  bool  `json:"paused"`
	Version int64 `json:"version"` // of the action's stream
	// Served is whether a live worker serves the action's runner now. An
	// action whose runner nobody serves (an unknown name, or one only
	// stopped workers registered) is accepted, and its executions wait in
	// its queue until a worker registers the runner.
	Served bool `json:"served"`
}

// ActionList is the answer of GET /api/v1/actions, sorted by ref.
type ActionList struct {
	Actions []Action `json:"actions"`
}

// Reason is the optional body of pause and cancel requests.
type Reason struct {
	Reason string `json:"reason"`
}
