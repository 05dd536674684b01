// What the executor counts: each decision counted once its append lands,
// races lost to other writers, events passed over. Written by the
// executor's appenders, read by metrics and tests.

package executor

import (
	"sync/atomic"
)

// Stats counts what the executor wrote and what it lost to other writers.
type Stats struct {
	Grants, Rejections, Expiries, Abandons, Cancels, Failures, Conflicts atomic.Int64
	LostWorkers, Children, ParentsEnded                                  atomic.Int64
	// Undecodable counts the events the fold passed over because they did
	// not decode (logged one by one; the audit reports them).
	Undecodable atomic.Int64
	// Repairs counts the single-stream writes this executor completed from
	// the log: handoffs of grants, children of announced fan-outs and
	// announced action changes whose writer stopped before writing them.
	Repairs atomic.Int64
	// TimedCycles counts the cycles that checked the time-based rules, each
	// counted once its decisions, and those of every earlier cycle, have
	// been appended (or refused).
	TimedCycles atomic.Int64
	// Retries counts failed runs taken back to back off; Requeues, backoffs
	// ended (the execution waits in its queue again).
	Retries, Requeues atomic.Int64
	// Ticks counts schedule ticks requested (see schedule.go).
	Ticks atomic.Int64
	// Checkpoints counts the checkpoints written into the log (checkpoint.go).
	Checkpoints atomic.Int64
}
