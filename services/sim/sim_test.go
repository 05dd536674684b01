package sim_test

import (
	"flag"
	"os"
	"testing"
	"time"

	"github.com/turnstile/turnstile/services/sim"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "TestSimulate: the seed to replay (0: pick one from the time and print it)")
	stepsFlag = flag.Int("steps", 5000, "TestSimulate: steps with faults on")
	traceFlag = flag.Bool("trace", false, "TestSimulate: print every step")
)

// TestSimulate runs one simulation: `make simulate SEED=… STEPS=…` replays
// a seed exactly.
func TestSimulate(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	cfg := sim.Config{Seed: seed, Steps: *stepsFlag}
	if *traceFlag {
		cfg.Trace = os.Stdout
	}
	res, err := sim.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d: %d steps, %d events, %d executions (%v), %s simulated; executor crashes %d, split brains %d, late decisions %d, worker crashes %d, stalls %d, lost messages %d, duplicates %d; log faults %+v; log sha256 %s",
		res.Seed, res.Steps, res.Events, res.Executions, res.ByStatus, res.SimulatedTime, res.ExecutorCrashes, res.SplitBrains,
		res.LateDecisions, res.WorkerCrashes, res.WorkerStalls, res.LostMessages, res.DuplicateMessages, res.Faults, res.Digest)
}

// TestSeeds runs a fixed budget of random seeds (fewer under -short) and
// prints the seed of any failure.
func TestSeeds(t *testing.T) {
	seeds, steps := 40, 3000
	if testing.Short() {
		seeds = 8
	}
	base := uint64(time.Now().UnixNano())
	total := 0
	start := time.Now()
	for i := range seeds {
		seed := base + uint64(i)*0x9e3779b97f4a7c15
		res, err := sim.Run(sim.Config{Seed: seed, Steps: steps})
		if err != nil {
			t.Fatalf("%v", err)
		}
		total += res.Steps
	}
	el := time.Since(start)
	t.Logf("%d seeds, %d steps in %s: %.0f steps/s", seeds, total, el.Round(time.Millisecond), float64(total)/el.Seconds())
}
