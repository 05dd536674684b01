package sim_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/sim"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "TestSimulate: the seed to replay (0: pick one from the time and print it)")
	stepsFlag = flag.Int("steps", 5000, "TestSimulate: steps with faults on")
	traceFlag = flag.Bool("trace", false, "TestSimulate: print every step")
	splitFlag = flag.Bool("split-brain", false, "TestSimulate: let two executors decide at once now and then")
	single    = flag.Bool("single-stream", false, "TestSimulate: a log without atomic multi-stream appends (the executor's single-stream path)")
	mixedFlag = flag.Bool("mixed-runners", false, "TestSimulate: workers that serve different runners (Config.MixedRunners)")
	archFlag  = flag.Bool("archive", false, "TestSimulate: checkpoints in the log, the live log archived and trimmed (Config.Archive)")
)

// TestSimulate runs one simulation when TURNSTILE_SIMULATE is set (that is
// what `make simulate SEED=… STEPS=…` does): it replays a seed exactly.
func TestSimulate(t *testing.T) {
	if os.Getenv("TURNSTILE_SIMULATE") == "" {
		t.Skip("set TURNSTILE_SIMULATE (make simulate) to run one seed; TestSeeds runs many")
	}
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	cfg := sim.Config{Seed: seed, Steps: *stepsFlag, SplitBrain: *splitFlag, SingleStream: *single, MixedRunners: *mixedFlag, Archive: *archFlag}
	if *traceFlag {
		cfg.Trace = os.Stdout
	}
	start := time.Now()
	res, err := sim.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	t.Logf("seed %d: %d steps in %s (%.0f steps/s), %d events, %d executions (%v), %s simulated; executor crashes %d, split brains %d, late decisions %d, worker crashes %d, stalls %d, lost messages %d, duplicates %d; single-stream repairs %d, void grants %d; log faults %+v; log sha256 %s",
		res.Seed, res.Steps, el.Round(time.Millisecond), float64(res.Steps)/el.Seconds(), res.Events, res.Executions, res.ByStatus, res.SimulatedTime,
		res.ExecutorCrashes, res.SplitBrains, res.LateDecisions, res.WorkerCrashes, res.WorkerStalls, res.LostMessages, res.DuplicateMessages,
		res.Repairs, res.VoidGrants, res.Faults, res.Digest)
}

// TestSeeds runs random seeds of 3000 steps each for a fixed budget of wall
// time (TURNSTILE_SIM_BUDGET, a Go duration; default 20s, 5s under -short;
// at least 4 seeds) and prints the seed of any failure. Every other seed
// runs on a log without atomic multi-stream appends (Config.SingleStream),
// one in four lets two executors decide at once (Config.SplitBrain), and
// one in five archives (Config.Archive).
func TestSeeds(t *testing.T) {
	budget := 20 * time.Second
	if testing.Short() {
		budget = 5 * time.Second
	}
	if s := os.Getenv("TURNSTILE_SIM_BUDGET"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("TURNSTILE_SIM_BUDGET: %v", err)
		}
		budget = d
	}
	base := uint64(time.Now().UnixNano())
	// Printed first, so that any failure (even a panic or a hang) replays:
	// seed i is base + i*0x9e3779b97f4a7c15, single-stream when i is odd,
	// split brain when i%4 == 2, mixed runners when i%3 == 1, archiving
	// when i%5 == 3.
	t.Logf("random seeds from base %d (seed i = base + i*0x9e3779b97f4a7c15; i odd: SINGLE=1; i%%4 == 2: SPLIT=1; i%%3 == 1: MIXED=1; i%%5 == 3: ARCHIVE=1); a failed seed joins testdata/seeds", base)
	total, seeds := 0, 0
	start := time.Now()
	for ; seeds < 4 || time.Since(start) < budget; seeds++ {
		seed := base + uint64(seeds)*0x9e3779b97f4a7c15
		single, split, mixed, archive := seeds%2 == 1, seeds%4 == 2, seeds%3 == 1, seeds%5 == 3
		res, err := runSeed(sim.Config{Seed: seed, Steps: 3000, SingleStream: single, SplitBrain: split, MixedRunners: mixed, Archive: archive})
		if err != nil {
			t.Fatalf("single-stream %v, split brain %v, mixed runners %v, archive %v: %v", single, split, mixed, archive, err)
		}
		total += res.Steps
	}
	el := time.Since(start)
	t.Logf("%d seeds, %d steps in %s: %.0f steps/s", seeds, total, el.Round(time.Millisecond), float64(total)/el.Seconds())
}

// TestMixedRunners: workers that serve different runners, actions of
// different runners; every execution still ends exactly once and the audit
// (no handoff to an incarnation that does not serve its runner) is clean.
func TestMixedRunners(t *testing.T) {
	for _, seed := range []uint64{7, 11, 12} {
		for _, single := range []bool{false, true} {
			res, err := sim.Run(sim.Config{Seed: seed, Steps: 3000, MixedRunners: true, SingleStream: single})
			if err != nil {
				t.Fatalf("seed %d single-stream %v: %v", seed, single, err)
			}
			if res.Executions < 50 {
				t.Errorf("seed %d: only %d executions", seed, res.Executions)
			}
		}
	}
}

// runSeed is sim.Run that turns a panic into an error naming the seed.
func runSeed(cfg sim.Config) (res *sim.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			flags := ""
			if cfg.SingleStream {
				flags += " SINGLE=1"
			}
			if cfg.SplitBrain {
				flags += " SPLIT=1"
			}
			if cfg.MixedRunners {
				flags += " MIXED=1"
			}
			if cfg.Archive {
				flags += " ARCHIVE=1"
			}
			res, err = nil, fmt.Errorf("seed %d panicked: %v (replay: make simulate SEED=%d STEPS=%d%s)\n%s",
				cfg.Seed, p, cfg.Seed, cfg.Steps, flags, debug.Stack())
		}
	}()
	return sim.Run(cfg)
}

// TestReplayIsExact: the same seed gives the same log, byte for byte, and
// another seed another log.
func TestReplayIsExact(t *testing.T) {
	a, err := sim.Run(sim.Config{Seed: 7, Steps: 3000})
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.Run(sim.Config{Seed: 7, Steps: 3000})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Log, b.Log) || a.Digest != b.Digest {
		t.Fatalf("seed 7 twice: logs of %d and %d bytes differ (%s, %s)", len(a.Log), len(b.Log), a.Digest, b.Digest)
	}
	if a.Events < 500 || a.Executions < 50 || a.ExecutorCrashes == 0 || a.WorkerCrashes == 0 || a.Faults.TimeoutsAfter == 0 {
		t.Fatalf("seed 7 exercised too little: %+v", a)
	}
	c, err := sim.Run(sim.Config{Seed: 8, Steps: 3000})
	if err != nil {
		t.Fatal(err)
	}
	if c.Digest == a.Digest {
		t.Fatal("seeds 7 and 8 gave the same log")
	}
}

// TestSingleStreamReplay: on a log without atomic multi-stream appends the
// simulation cuts the executor's and the commands' writes short (the log's
// faults stop a chain of appends after its fence) and the executors complete
// them from the log; the invariants hold at every step, every execution
// ends, the audit passes, and the same seed gives the same log.
func TestSingleStreamReplay(t *testing.T) {
	var repairs, void int
	for _, seed := range []uint64{7, 11, 12} {
		a, err := sim.Run(sim.Config{Seed: seed, Steps: 3000, SingleStream: true})
		if err != nil {
			t.Fatal(err)
		}
		repairs += a.Repairs
		void += a.VoidGrants
		if seed != 7 {
			continue
		}
		b, err := sim.Run(sim.Config{Seed: seed, Steps: 3000, SingleStream: true})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Log, b.Log) {
			t.Fatalf("seed %d twice on a single-stream log: the logs differ (%s, %s)", seed, a.Digest, b.Digest)
		}
		atomic, err := sim.Run(sim.Config{Seed: seed, Steps: 3000})
		if err != nil {
			t.Fatal(err)
		}
		if atomic.Digest == a.Digest {
			t.Fatal("the single-stream log equals the atomic one: the option changed nothing")
		}
	}
	t.Logf("single-stream repairs %d, void grants %d", repairs, void)
	if repairs == 0 {
		t.Error("no seed left a partial write for an executor to complete: the single-stream path's repairs went untested")
	}
}

// TestCatchesBugs: with a deliberate bug injected, some seed fails the
// checker, and replaying that seed fails the same way.
func TestCatchesBugs(t *testing.T) {
	for _, bug := range []struct {
		name string
		bug  sim.Bug
		rule string
	}{
		{"unfenced grants", sim.BugUnfencedGrants, "grant"},
		{"unfenced workers", sim.BugUnfencedWorkers, ""},
		{"over-grant", sim.BugOverGrant, "max_concurrent"},
		{"early requeue", sim.BugEarlyRequeue, "backoff"},
		{"ignore priority", sim.BugIgnorePriority, "priority"},
		{"ignore total", sim.BugIgnoreTotal, "round robin|exceeds max_concurrent_total"},
		{"tick twice", sim.BugTickTwice, "schedule_tick"},
	} {
		t.Run(bug.name, func(t *testing.T) {
			var failed *sim.Failure
			for seed := uint64(1); seed <= 200 && failed == nil; seed++ {
				_, err := sim.Run(sim.Config{Seed: seed, Steps: 3000, Bug: bug.bug})
				if err != nil && !errors.As(err, &failed) {
					t.Fatal(err)
				}
			}
			if failed == nil {
				t.Fatal("no seed of 200 found the bug")
			}
			t.Logf("found: %v", failed)
			if !slices.ContainsFunc(strings.Split(bug.rule, "|"), func(r string) bool { return strings.Contains(failed.Error(), r) }) {
				t.Errorf("the failure does not name the rule %q", bug.rule)
			}
			_, err := sim.Run(sim.Config{Seed: failed.Seed, Steps: failed.Steps, Bug: bug.bug})
			var again *sim.Failure
			if !errors.As(err, &again) || again.Error() != failed.Error() {
				t.Fatalf("replaying seed %d: %v, want %v", failed.Seed, err, failed)
			}
		})
	}
}

// TestWorkerClockSkew: workers whose own clocks are off by ±30s or ±5min
// (their heartbeats and their runs' durations and timeouts paced by those
// clocks) change nothing: the log is the same, byte for byte, as with exact
// clocks. Leases, handoff deadlines and queue timeouts are judged by the
// executor against the log's times, and a worker writes no time of its own.
func TestWorkerClockSkew(t *testing.T) {
	for _, seed := range []uint64{3} {
		base, err := sim.Run(sim.Config{Seed: seed, Steps: 2000})
		if err != nil {
			t.Fatal(err)
		}
		for _, skew := range [][]time.Duration{
			{30 * time.Second}, {-30 * time.Second}, {5 * time.Minute}, {-5 * time.Minute},
			{30 * time.Second, -5 * time.Minute, 5 * time.Minute},
		} {
			res, err := sim.Run(sim.Config{Seed: seed, Steps: 2000, WorkerSkew: skew})
			if err != nil {
				t.Fatalf("skew %v: %v", skew, err)
			}
			if !bytes.Equal(res.Log, base.Log) {
				t.Errorf("seed %d, worker clocks off by %v: the log differs from the one with exact clocks", seed, skew)
			}
		}
	}
}
