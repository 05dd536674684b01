package domain

import (
	"encoding/json"
	"time"
)

// Traces: a request may carry a W3C trace context (its traceparent
// header). The execution.requested event keeps it in its metadata, next to
// the principal ("traceparent"); the fold keeps it with the execution and
// the handoff (execution.scheduled) carries it in its payload, so a worker
// starts the run's span in the caller's trace. The log only stores it: a
// traceparent changes no decision of the fold.

// ValidTraceparent reports whether s is a W3C traceparent of version 00:
// "00-" 32 lowercase hex (not all zero) "-" 16 lowercase hex (not all
// zero) "-" 2 lowercase hex.
func ValidTraceparent(s string) bool {
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return false
	}
	hex := func(p string) (ok, zero bool) {
		zero = true
		for i := 0; i < len(p); i++ {
			c := p[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false, false
			}
			if c != '0' {
				zero = false
			}
		}
		return true, zero
	}
	tOK, tZero := hex(s[3:35])
	sOK, sZero := hex(s[36:52])
	fOK, _ := hex(s[53:])
	return tOK && !tZero && sOK && !sZero && fOK
}

// WithTraceparent is meta (an event's metadata: empty or a JSON object)
// with its "traceparent" set to tp. An invalid tp, or metadata that is not
// an object, leaves meta as it is.
func WithTraceparent(meta json.RawMessage, tp string) json.RawMessage {
	if !ValidTraceparent(tp) {
		return meta
	}
	m := map[string]json.RawMessage{}
	if len(meta) > 0 {
		if err := json.Unmarshal(meta, &m); err != nil {
			return meta
		}
	}
	m["traceparent"], _ = json.Marshal(tp) // a string always encodes
	b, err := json.Marshal(m)
	if err != nil {
		return meta
	}
	return b
}

// TraceparentOf is the valid traceparent an event's metadata records, or "".
func TraceparentOf(meta json.RawMessage) string {
	if len(meta) == 0 {
		return ""
	}
	var m struct {
		Traceparent string `json:"traceparent"`
	}
	if json.Unmarshal(meta, &m) != nil || !ValidTraceparent(m.Traceparent) {
		return ""
	}
	return m.Traceparent
}

// SetTraceparent records the trace context of x's request (the fold calls
// it with the traceparent of the execution.requested event's metadata).
func (x *Execution) SetTraceparent(tp string) {
	if ValidTraceparent(tp) {
		x.traceparent = tp
	}
}

// Traceparent is the trace context of x's request, or "".
func (x *Execution) Traceparent() string { return x.traceparent }

// RunningAt is the log time the current run started (zero: not running).
func (x *Execution) RunningAt() time.Time { return x.runningAt }

// EndedAt is the log time x ended (zero: not ended).
func (x *Execution) EndedAt() time.Time { return x.endedAt }
