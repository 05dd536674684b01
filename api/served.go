package api

import (
	"sort"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
)

// served says which runners the active workers serve, as the views show
// them: every runner if one of them registered none (it runs everything).
type served struct {
	all     bool
	runners map[string]bool
}

func servedBy(v *projections.Views) served {
	s := served{runners: map[string]bool{}}
	for _, w := range v.Workers() {
		if w.Status != domain.WorkerActive {
			continue
		}
		if len(w.Runners) == 0 {
			s.all = true
		}
		for _, r := range w.Runners {
			s.runners[r] = true
		}
	}
	return s
}

func (s served) serves(runner string) bool { return s.all || s.runners[runner] }

// withNoWorker sets NoWorker on the statistics of actions whose runner no
// active worker serves (their executions wait in the queue meanwhile).
func withNoWorker(v *projections.Views, sv served, st wire.QueueStats) wire.QueueStats {
	if a, ok := v.Action(st.Action); ok && !sv.serves(a.Runner) {
		st.NoWorker = true
	}
	return st
}

// unservedRunners lists, sorted, the runners of defined actions that no
// active worker serves.
func unservedRunners(v *projections.Views, sv served) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, a := range v.Actions() {
		if !sv.serves(a.Runner) && !seen[a.Runner] {
			seen[a.Runner] = true
			out = append(out, a.Runner)
		}
	}
	sort.Strings(out)
	return out
}
