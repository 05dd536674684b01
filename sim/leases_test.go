package sim_test

import (
	"bytes"
	"testing"

	"github.com/turnstile/turnstile/sim"
)

// TestSimulationDrivesLeases: a plain seed's workers pay their debts of a
// sign of life on their own clocks (heartbeats only while they owe one),
// and crashes and stalls past the lease make the executor declare
// incarnations lost by the lease, which the checker's own model of the rule
// (leases.go) judges at every position: no verdict before the debt is a
// lease old, none on an incarnation that owes nothing.
func TestSimulationDrivesLeases(t *testing.T) {
	res, err := sim.Run(sim.Config{Seed: 7, Steps: 3000})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"worker.heartbeat"`, `"lease_ms":15000`, `"owed_since"`} {
		if n := bytes.Count(res.Log, []byte(s)); n == 0 {
			t.Errorf("no %s in seed 7's log", s)
		} else {
			t.Logf("%s: %d", s, n)
		}
	}
}
