// An action accepted with a runner no live worker serves: its executions
// would wait in its queue, so the server's log says so when it is defined.
package command

import (
	"slices"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
)

// warnUnserved logs a warning (on Log, when set) when no live worker, as
// the read model knows them (Views, when set), serves the runner of action
// a: it is accepted, and its executions wait in its queue until one does.
func (c *Service) warnUnserved(a *domain.Action) {
	if c.Log == nil || c.Views == nil || a == nil || !a.Defined() {
		return
	}
	p := a.Policy()
	if Served(c.Views.Workers(), p.Runner) {
		return
	}
	c.Log.Warn("no live worker serves this action's runner: its executions will wait in its queue until one does",
		"action", p.Ref, "runner", p.Runner)
}

// Served reports whether an active worker among workers serves runner.
func Served(workers []projections.WorkerView, runner string) bool {
	for _, w := range workers {
		if w.Status == domain.WorkerActive && slices.Contains(w.Runners, runner) {
			return true
		}
	}
	return false
}
