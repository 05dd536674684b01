package sim_test

import (
	"testing"

	"github.com/turnstile/turnstile/sim"
)

// TestSimulationArchives runs seeds with Config.Archive on both kinds of
// log: checkpoints are written through the faulty log and the live log is
// trimmed at them again and again, executors (re)start from checkpoints,
// the forwarder resumes at the live log's start, requests are retried after
// their executions were archived; every invariant holds, and
// the whole history audits clean (each checkpoint equal to the fold at its
// position) and rebuilds to the live read model; the live log alone audits
// clean from its checkpoint, and a read model started from its newest
// checkpoint has the whole history's statistics (livealone.go).
func TestSimulationArchives(t *testing.T) {
	t.Parallel()
	trims, cps, retries := 0, 0, 0
	for _, single := range []bool{false, true} {
		for seed := uint64(1); seed <= 6; seed++ {
			res, err := sim.Run(sim.Config{Seed: seed, Steps: 3000, Archive: true, SingleStream: single, SplitBrain: seed%3 == 0, MixedRunners: seed%2 == 0})
			if err != nil {
				t.Fatal(err)
			}
			trims, cps, retries = trims+res.Trims, cps+res.Checkpoints, retries+res.ArchivedRetries
		}
	}
	if trims == 0 || cps == 0 || retries == 0 {
		t.Fatalf("%d checkpoints written, %d trims and %d retries answered from the archive over 12 runs", cps, trims, retries)
	}
	t.Logf("%d checkpoints, %d trims, %d retries answered from the archive over 12 runs", cps, trims, retries)
}

// TestArchivingReplayIsExact: the same seed gives the same log, archive
// and all.
func TestArchivingReplayIsExact(t *testing.T) {
	t.Parallel()
	a, err := sim.Run(sim.Config{Seed: 11, Steps: 3000, Archive: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.Run(sim.Config{Seed: 11, Steps: 3000, Archive: true})
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest || a.Trims != b.Trims {
		t.Fatalf("two runs of one seed differ: %s (%d trims), %s (%d trims)", a.Digest, a.Trims, b.Digest, b.Trims)
	}
}
