package sim

import (
	"encoding/json"
	"fmt"
	"slices"
)

// The oracle: who may write which execution event from which state, written
// out again here from the documented rules (DESIGN.md's lifecycle table and
// API.md's with_items and cancellation sections), with no code or table of
// domain's. The checker judges every execution event by it as well as by
// domain.Execution.Validate, so a wrong row of domain/rule.go (one the
// services and the audit share) cannot hide itself: an event the domain
// wrongly lets through still breaks the oracle. Its fold is its own too:
// the state, the worker named in the last handoff, and whether the stream
// is a with_items parent, read from the events' JSON.

// oracleRow: an event of type typ, written by owner while the execution is
// in one of the states from, for a parent (with_items) or a plain one,
// leads to the state to ("" keeps the state). A worker may write only for
// the worker named in the last execution.scheduled.
type oracleRow struct {
	typ   string
	owner string
	from  []string
	kind  string // "plain", "parent" or "" for both
	to    string
}

const (
	oNew, oRequested, oScheduling, oScheduled, oRunning = "new", "requested", "scheduling", "scheduled", "running"
)

var oracleRows = []oracleRow{
	// DESIGN.md: requested by the executor (accepting the API's command) when the stream is new.
	{"execution.requested", "executor", []string{oNew}, "", oRequested},
	// rejected by the executor, not yet granted.
	{"execution.rejected", "executor", []string{oRequested}, "", "rejected"},
	// a slot granted (scheduling), then the handoff (scheduled) naming the worker: the executor's.
	{"execution.scheduling", "executor", []string{oRequested}, "plain", oScheduling},
	{"execution.scheduled", "executor", []string{oScheduling}, "plain", oScheduled},
	// running: the worker named in scheduled; completed/failed/timed_out: that worker, from running.
	{"execution.running", "worker", []string{oScheduled}, "plain", oRunning},
	{"execution.completed", "worker", []string{oRunning}, "plain", "completed"},
	{"execution.failed", "worker", []string{oRunning}, "plain", "failed"},
	{"execution.timed_out", "worker", []string{oRunning}, "plain", "timed_out"},
	// the executor fails a run it cannot hand off (max_attempts spent) before the handoff.
	{"execution.failed", "executor", []string{oScheduling}, "plain", "failed"},
	// cancelled: the executor before the handoff, the worker after it.
	{"execution.cancelled", "executor", []string{oRequested, oScheduling}, "", "cancelled"},
	{"execution.cancelled", "worker", []string{oScheduled, oRunning}, "plain", "cancelled"},
	// cancel_requested: a request, not a transition, while not terminal (the API's, or the
	// executor's for the children of a cancelled with_items parent).
	{"execution.cancel_requested", "api", []string{oRequested, oScheduling, oScheduled, oRunning}, "", ""},
	{"execution.cancel_requested", "executor", []string{oRequested, oScheduling, oScheduled, oRunning}, "", ""},
	// handoff_expired: scheduled, no worker event yet; back to the executor.
	{"execution.handoff_expired", "executor", []string{oScheduled}, "plain", oScheduling},
	// abandoned: its worker declared lost, after the handoff; back to the executor.
	{"execution.abandoned", "executor", []string{oScheduled, oRunning}, "plain", oScheduling},
	// docs/retries.md, "Retries": a run that fails or times out with runs left is
	// reported by its worker as run_failed (running → scheduling, the slot still
	// held); the executor then releases the slot for the backoff
	// (retry_scheduled: scheduling → requested, waiting outside its queue) and,
	// once the backoff or a request's run_at is over, puts it back at the end of
	// its queue (requeued, still requested).
	{"execution.run_failed", "worker", []string{oRunning}, "plain", oScheduling},
	{"execution.retry_scheduled", "executor", []string{oScheduling}, "plain", oRequested},
	{"execution.requeued", "executor", []string{oRequested}, "plain", ""},
	// A with_items parent takes no slot and runs on no worker: the executor starts it,
	// requests its children, and ends it (completed once all children ended, failed or
	// cancelled).
	{"execution.running", "executor", []string{oRequested}, "parent", oRunning},
	{"execution.children_requested", "executor", []string{oRunning}, "parent", ""},
	{"execution.completed", "executor", []string{oRunning}, "parent", "completed"},
	{"execution.failed", "executor", []string{oRequested, oRunning}, "parent", "failed"},
	{"execution.cancelled", "executor", []string{oRunning}, "parent", "cancelled"},
}

// oracleExec is the oracle's fold of one execution stream.
type oracleExec struct {
	state  string
	worker string // named by the last execution.scheduled
	parent bool
}

func (x *oracleExec) terminal() bool {
	switch x.state {
	case "completed", "failed", "timed_out", "cancelled", "rejected":
		return true
	}
	return false
}

// oracleJudge checks one execution event against the oracle's rows and, if
// it is lawful, folds it. It returns "" or what the event breaks.
func oracleJudge(x *oracleExec, typ, owner, writer string, data []byte) string {
	if x.terminal() {
		return fmt.Sprintf("%s after the terminal state %s", typ, x.state)
	}
	kind := "plain"
	if x.parent {
		kind = "parent"
	}
	var fields struct {
		Worker string `json:"worker"`
		Items  int    `json:"items"`
	}
	if typ == "execution.requested" || typ == "execution.scheduled" {
		if err := json.Unmarshal(data, &fields); err != nil {
			return fmt.Sprintf("%s: %v", typ, err)
		}
	}
	known := false
	for _, r := range oracleRows {
		if r.typ != typ {
			continue
		}
		known = true
		if (r.kind != "" && r.kind != kind) || r.owner != owner || !slices.Contains(r.from, x.state) {
			continue
		}
		if owner == "worker" && writer != x.worker {
			return fmt.Sprintf("worker %q wrote %s for an execution handed to worker %q", writer, typ, x.worker)
		}
		switch typ {
		case "execution.requested":
			x.parent = fields.Items > 0
		case "execution.scheduled":
			x.worker = fields.Worker
		}
		if r.to != "" {
			x.state = r.to
		}
		return ""
	}
	if !known {
		return fmt.Sprintf("%s is no execution event", typ)
	}
	return fmt.Sprintf("%s by %s is not allowed in state %s (%s execution)", typ, owner, x.state, kind)
}
