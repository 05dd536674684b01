package sim_test

import (
	"bytes"
	"testing"

	"github.com/turnstile/turnstile/sim"
)

// TestSimulationDrivesSchedules: a plain seed and a split-brain seed define
// two cron schedules (every 10 s, every minute); the executors request
// their ticks through crashes, fail-overs and (with SplitBrain) two
// executors deciding at once, and the checker's own rule (each tick
// produced at most one execution, ticks.go) and the audit's schedule_tick
// judge every request. Catches: the simulation not driving ticks at all
// (no tick in the log); with BugTickTwice, TestCatchesBugs/tick_twice.
func TestSimulationDrivesSchedules(t *testing.T) {
	for _, cfg := range []sim.Config{{Seed: 7, Steps: 3000}, {Seed: 11, Steps: 3000, SplitBrain: true}} {
		res, err := sim.Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{`"schedule":"s0"`, `"schedule":"s1"`} {
			if n := bytes.Count(res.Log, []byte(s)); n == 0 {
				t.Errorf("seed %d: no %s in the log", cfg.Seed, s)
			}
		}
		t.Logf("seed %d (split brain %v): %d tick requests, %s simulated, split brains %d, executor crashes %d", cfg.Seed, cfg.SplitBrain,
			bytes.Count(res.Log, []byte(`"tick":"`)), res.SimulatedTime, res.SplitBrains, res.ExecutorCrashes)
	}
}
