package sim_test

import (
	"bytes"
	"testing"

	"github.com/turnstile/turnstile/internal/sim"
)

// TestSimulationDrivesRetries: the simulation's actions retry failed runs,
// so a plain seed's log holds failed runs taken back, backoffs and requeues
// (which the checker judges at every position: the backoff by log time,
// the slot released, attempts within the limit).
func TestSimulationDrivesRetries(t *testing.T) {
	res, err := sim.Run(sim.Config{Seed: 7, Steps: 3000})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{`"execution.run_failed"`, `"execution.retry_scheduled"`, `"execution.requeued"`} {
		if n := bytes.Count(res.Log, []byte(typ)); n == 0 {
			t.Errorf("no %s in seed 7's log", typ)
		} else {
			t.Logf("%s: %d", typ, n)
		}
	}
}
