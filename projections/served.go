package projections

import (
	"slices"

	"github.com/turnstile/turnstile/domain"
)

// Served reports whether some live worker serves runner: an active worker
// (registered, not draining, stopped or declared lost) that registered it.
// An action whose runner nobody serves is accepted (a remote worker may
// register it later) but waits in its queue until one does; its view says
// so (ActionView.Served).
func (v *Views) Served(runner string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.servedLocked(runner)
}

func (v *Views) servedLocked(runner string) bool {
	for _, w := range v.st.Workers {
		if w.Status() == domain.WorkerActive && slices.Contains(w.Runners(), runner) {
			return true
		}
	}
	return false
}
