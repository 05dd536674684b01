// Package crashpoint lets a crash test kill the process at a named place in
// the code, the Nth time it passes there. The environment variable
// TURNSTILE_CRASHPOINT arms it: "name:N" (or several, "a:3,b:1") makes Hit
// kill the process with SIGKILL the Nth time it is called with that name.
// Unset, Hit costs one load of a boolean: nothing is armed in production.
//
// The points (see Names) sit at the seams where a crash is most likely to
// lose or duplicate work: after an append and before its bus message, after
// a grant and before the handoff reaches a worker, in the middle of a
// handoff, and between a derived update and its checkpoint.
package crashpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// Env is the environment variable that arms crash points.
const Env = "TURNSTILE_CRASHPOINT"

// The crash points placed in the code.
const (
	// ExecutorAppended: an append of the executor's has committed; the
	// executor has not folded it and the forwarder may not have published it.
	ExecutorAppended = "executor.appended"
	// ExecutorGranted: a slot grant and its handoff have committed; the
	// worker has not been told.
	ExecutorGranted = "executor.granted"
	// ExecutorTakenBack: an execution was taken back from its worker
	// (handoff expired, abandoned, worker lost): it holds its slot with no
	// handoff until the executor hands it again.
	ExecutorTakenBack = "executor.taken-back"
	// ForwarderBeforePublish: an event is in the log and its bus message is
	// not sent yet.
	ForwarderBeforePublish = "forwarder.before-publish"
	// ForwarderBeforeCheckpoint: messages are published and the checkpoint
	// that covers them is not saved yet.
	ForwarderBeforeCheckpoint = "forwarder.before-checkpoint"
	// WorkerGotHandoff: a worker took a handoff from the bus and has not
	// written execution.running.
	WorkerGotHandoff = "worker.got_handoff"
	// WorkerStarted: execution.running is in the log; the runner has not run.
	WorkerStarted = "worker.started"
	// WorkerFinished: the runner returned; the result is not in the log yet.
	WorkerFinished = "worker.finished"

	// CheckpointParts: a checkpoint's parts are in the log, its
	// checkpoint.written is not.
	CheckpointParts = "checkpoint.parts"
	// ArchiverWritten: the archive segments up to a checkpoint are written
	// (renamed into place); the live log is not trimmed yet.
	ArchiverWritten = "archiver.written"
	// ArchiverTrimmed: the live log is trimmed at a checkpoint; the
	// archiver has not logged it.
	ArchiverTrimmed = "archiver.trimmed"
)

// ArchiveNames lists the crash points of checkpoints and archiving, which
// only a process that writes checkpoints and archives passes (serve
// --checkpoint-every, --archive).
func ArchiveNames() []string { return []string{CheckpointParts, ArchiverWritten, ArchiverTrimmed} }

// Names lists every crash point placed in the code but ArchiveNames.
func Names() []string {
	return []string{ExecutorAppended, ExecutorGranted, ExecutorTakenBack, ForwarderBeforePublish,
		ForwarderBeforeCheckpoint, WorkerGotHandoff, WorkerStarted, WorkerFinished}
}

type point struct {
	at   int64
	seen atomic.Int64
}

var (
	armed  bool
	points map[string]*point
)

func init() {
	if err := arm(os.Getenv(Env)); err != nil {
		fmt.Fprintf(os.Stderr, "turnstile: %s: %v\n", Env, err)
		os.Exit(2)
	}
}

// arm parses spec ("name:N,name:N"); "" arms nothing.
func arm(spec string) error {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		armed, points = false, nil
		return nil
	}
	known := map[string]bool{}
	for _, n := range append(Names(), ArchiveNames()...) {
		known[n] = true
	}
	ps := map[string]*point{}
	for _, part := range strings.Split(spec, ",") {
		name, count, ok := strings.Cut(strings.TrimSpace(part), ":")
		n, err := strconv.ParseInt(count, 10, 64)
		switch {
		case !ok || err != nil || n < 1:
			return fmt.Errorf("%q is not NAME:N with N >= 1", part)
		case !known[name]:
			return fmt.Errorf("unknown crash point %q (known: %s)", name, strings.Join(Names(), ", "))
		}
		ps[name] = &point{at: n}
	}
	armed, points = true, ps
	return nil
}

// Hit marks a pass through crash point name and kills the process with
// SIGKILL if this is the pass it is armed for. It does nothing when nothing
// is armed.
func Hit(name string) {
	if !armed {
		return
	}
	hit(name)
}

func hit(name string) {
	p := points[name]
	if p == nil || p.seen.Add(1) != p.at {
		return
	}
	fmt.Fprintf(os.Stderr, "turnstile: crash point %s reached (pass %d): SIGKILL\n", name, p.at)
	self, err := os.FindProcess(os.Getpid())
	if err == nil {
		err = self.Kill() // SIGKILL: no deferred function, no flush, no goodbye
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "turnstile: crash point %s: cannot kill the process: %v\n", name, err)
		os.Exit(137)
	}
	select {} // the signal is on its way
}
