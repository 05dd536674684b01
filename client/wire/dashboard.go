// The dashboard's reads: a page of an action's waiters, who the caller is,
// and the audit's verdict.
package wire

// WaiterPage is the answer of GET /api/v1/actions/{ref}/waiters: the waiters
// from offset on (FIFO order, offset 0 is the next to be granted), at most
// limit of them, out of total, and all the active executions, as of the log
// position Position.
type WaiterPage struct {
	Action   string   `json:"action"`
	Paused   bool     `json:"paused"`
	Total    int      `json:"total"`
	Offset   int      `json:"offset"`
	Waiting  []Waiter `json:"waiting"`
	Active   []string `json:"active"`
	Position uint64   `json:"position"`
}

// WhoAmI is the answer of GET /api/v1/whoami: the role of the presented
// token, or admin and Anonymous when no token is configured.
type WhoAmI struct {
	Role      string `json:"role"`
	Principal string `json:"principal,omitempty"` // the token's name
	Anonymous bool   `json:"anonymous"`
}

// AuditVerdict is the answer of GET /api/v1/audit: the audit of the whole
// log (what `turnstile audit --json` prints) and whether it passed.
type AuditVerdict struct {
	OK         bool             `json:"ok"`
	Events     uint64           `json:"events"`
	Executions int              `json:"executions"`
	Ended      int              `json:"ended"`
	Open       int              `json:"open"`
	Grants     int              `json:"grants"`
	ByStatus   map[string]int   `json:"by_status"`
	Violations []AuditViolation `json:"violations"`
	Seconds    float64          `json:"seconds"`
	// From is set when the audit covered the live log alone from a
	// checkpoint (the log before it was archived, and the server has no
	// --archive): where it started and what it could not judge.
	From *AuditFrom `json:"from,omitempty"`
}

// AuditFrom says where an audit of the live log alone started.
type AuditFrom struct {
	LiveStart  uint64   `json:"live_start"` // the live log's first position
	Checkpoint uint64   `json:"checkpoint"` // the events from here on are judged, on the checkpoint's state
	NotJudged  []string `json:"not_judged"`
}

// AuditViolation is one place where the log breaks a rule.
type AuditViolation struct {
	Position uint64 `json:"position"`
	Stream   string `json:"stream"`
	Type     string `json:"type"`
	Rule     string `json:"rule"`
	Detail   string `json:"detail"`
	// Principal is who asked for the event through the API ("" for none).
	Principal string `json:"principal,omitempty"`
}
