package sim_test

import (
	"bytes"
	"testing"

	"github.com/turnstile/turnstile/sim"
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

// TestSimulationDrivesTotalLimit: a plain seed's keyed action has a
// max_concurrent_total (that policy changes turn on and off), so its
// grants are judged at every position by the total limit and the round
// robin (domain's CheckGrant and the checker's own model, round.go); and
// policy changes turn on_limit cancel_in_progress on and off, so the
// executor's cancel_requested of running executions goes through the
// handoff rule, the oracle and the checker with crashes and fail-overs.
// (Seed 3: seed 7 stopped cancelling a running execution for a newer request
// once idle workers stopped writing heartbeats, which moved its steps, and
// seed 2 once idempotency keys were dated, which changed their ids.)
func TestSimulationDrivesTotalLimit(t *testing.T) {
	res, err := sim.Run(sim.Config{Seed: 3, Steps: 3000})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"max_concurrent_total":2`, `"concurrency_key":"customer"`, `"on_limit":"cancel_in_progress"`,
		`on_limit cancel_in_progress: a newer request`} {
		if n := bytes.Count(res.Log, []byte(s)); n == 0 {
			t.Errorf("no %s in seed 3's log", s)
		}
	}
	t.Logf("grants: %d", bytes.Count(res.Log, []byte(`"queue.granted"`)))
}
