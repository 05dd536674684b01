package sim_test

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/sim"
)

// corpusSeed is one line of testdata/seeds.
type corpusSeed struct {
	seed                          uint64
	steps                         int
	single, split, mixed, archive bool
	line                          int
}

func readCorpus(t *testing.T) []corpusSeed {
	t.Helper()
	f, err := os.Open("testdata/seeds")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []corpusSeed
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 3 {
			t.Fatalf("testdata/seeds:%d: want seed, steps and flags (or -): %q", n, line)
		}
		s := corpusSeed{line: n}
		if s.seed, err = strconv.ParseUint(fields[0], 10, 64); err != nil {
			t.Fatalf("testdata/seeds:%d: %v", n, err)
		}
		if s.steps, err = strconv.Atoi(fields[1]); err != nil || s.steps <= 0 {
			t.Fatalf("testdata/seeds:%d: steps %q", n, fields[1])
		}
		for _, flag := range strings.Split(fields[2], ",") {
			switch flag {
			case "single":
				s.single = true
			case "split":
				s.split = true
			case "mixed":
				s.mixed = true
			case "archive":
				s.archive = true
			case "-":
			default:
				t.Fatalf("testdata/seeds:%d: unknown flag %q (single, split, mixed, archive or -)", n, flag)
			}
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSeedCorpus replays every seed of testdata/seeds: each has failed the
// simulation once (or catches a planted bug), so each must pass now. It
// runs on every `go test`, whatever TestSeeds' random budget finds.
func TestSeedCorpus(t *testing.T) {
	seeds := readCorpus(t)
	if len(seeds) == 0 {
		t.Fatal("testdata/seeds holds no seed")
	}
	for _, s := range seeds {
		_, err := runSeed(sim.Config{Seed: s.seed, Steps: s.steps, SingleStream: s.single, SplitBrain: s.split, MixedRunners: s.mixed, Archive: s.archive})
		if err != nil {
			t.Errorf("testdata/seeds:%d: %v", s.line, err)
		}
	}
	t.Logf("%d seeds of the corpus passed", len(seeds))
}
