package sim

import (
	"fmt"
	"io"
	"time"

	"github.com/turnstile/turnstile/eventstore/faulty"
)

// What a simulation is asked (Config, Bug) and what it answers (Result,
// Failure).

// Config says what to simulate. Zero fields take defaults.
type Config struct {
	Seed  uint64
	Steps int // scheduler steps with faults on (default 2000); then the faults stop until every execution has ended
	// Workers is how many workers there are (default 3), Actions how many
	// actions (default 3).
	Workers, Actions int
	// Faults are the log's failure rates; nil: faulty.DefaultRates.
	Faults *faulty.Rates
	// WorkerSkew gives worker i a clock that is WorkerSkew[i % len] off the
	// log's. It paces the worker's heartbeats and measures its runs; it must
	// change nothing in the log.
	WorkerSkew []time.Duration
	// SplitBrain lets a second executor start while one runs, both
	// deciding until one crashes (turnstile runs one active executor; this
	// is the window a lease handover can leave); see the package
	// documentation for what fences the lease rule then.
	SplitBrain bool
	// SingleStream runs the executor, the workers and the command side on a
	// log without atomic multi-stream appends (storetest.SingleStream, as
	// on KurrentDB), so the executor takes its single-stream path: fence
	// first, the rest after it, partial writes (cut short by the log's
	// faults) completed from the log.
	SingleStream bool
	// MixedRunners gives the workers different runner sets and the actions
	// different runners (core.noop, sim.a, sim.b; worker w1 serves all,
	// the others a random part): a handoff must go to an incarnation that
	// serves its runner (the audit checks it), and an execution whose
	// runner no live worker serves waits in its queue.
	MixedRunners bool
	// Archive makes the simulation write checkpoints of executors' folds
	// into the log and trim the live log at them, moving its prefix to an
	// archive of its own, at random steps (archive.go).
	Archive bool
	// Bug injects a deliberate bug, to show that the checker finds it.
	Bug Bug
	// Trace, if set, gets one line per step.
	Trace io.Writer
}

// Bug is a deliberate defect the simulation can inject.
type Bug int

const (
	// NoBug: the system as built.
	NoBug Bug = iota
	// BugUnfencedGrants: the log ignores the expected version of queue
	// streams, so a grant decided on a stale fold (before a pause or a
	// lower max_concurrent) lands anyway: an over-grant.
	BugUnfencedGrants
	// BugUnfencedWorkers: the log ignores the expected version of workers'
	// writes to executions, so a worker that was replaced writes anyway.
	BugUnfencedWorkers
	// BugOverGrant: the executor reads every action's max_concurrent one
	// higher than the log says, so it grants one slot too many.
	BugOverGrant
	// BugEarlyRequeue: the executor reads every backoff after a failed run
	// as zero, so it puts a retried execution back in its queue before its
	// backoff has ended.
	BugEarlyRequeue
	// BugIgnorePriority: the executor reads every request's priority as
	// the default, so it grants in request order alone.
	BugIgnorePriority
	// BugIgnoreTotal: the executor reads every action's
	// max_concurrent_total as none, so it grants past the total limit
	// and in request order across key values.
	BugIgnoreTotal
	// BugTickTwice: the executor's fold never learns that a schedule's
	// tick was requested, and the log takes each tick's request in a
	// stream of its own, so a tick is requested again (ticks.go).
	BugTickTwice
)

// Result describes a finished simulation.
type Result struct {
	Seed                uint64
	Steps               int // scheduler steps taken, faults on and off
	Events              uint64
	Executions, Ended   int
	ExecutorCrashes     int
	WorkerCrashes       int
	WorkerStalls        int
	LateDecisions       int // decisions of crashed executors that landed
	LostMessages        int
	DuplicateMessages   int
	SplitBrains         int
	Faults              faulty.Counts
	SimulatedTime       time.Duration
	Digest              string // SHA-256 of the log (Log's bytes)
	Log                 []byte // the whole log, one JSON event per line
	ByStatus            map[string]int
	DecisionsCommitted  int
	WorkerWritesRetried int
	// With Archive: checkpoints written, trims of the live log, and
	// retries answered from the archive (their execution had left the live
	// log: command.Service.History).
	Checkpoints, Trims, ArchivedRetries int
	// With SingleStream: partial writes the executors completed from the
	// log (Stats.Repairs), and grants void because their execution had
	// ended (the audit's VoidGrants).
	Repairs, VoidGrants int
}

// Failure is a broken invariant: the seed and step that reproduce it.
type Failure struct {
	Seed  uint64
	Steps int // the Config.Steps of the run
	Step  int // the step after which it was found
	Err   error
	// SingleStream, SplitBrain, MixedRunners and Archive are the run's Config's.
	SingleStream, SplitBrain, MixedRunners, Archive bool
}

func (f *Failure) Error() string {
	flags := ""
	if f.SingleStream {
		flags += " SINGLE=1"
	}
	if f.SplitBrain {
		flags += " SPLIT=1"
	}
	if f.MixedRunners {
		flags += " MIXED=1"
	}
	if f.Archive {
		flags += " ARCHIVE=1"
	}
	return fmt.Sprintf("simulation seed %d failed at step %d: %v (replay: make simulate SEED=%d STEPS=%d%s)", f.Seed, f.Step, f.Err, f.Seed, f.Steps, flags)
}

func (f *Failure) Unwrap() error { return f.Err }
