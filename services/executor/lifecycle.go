// The executor's lifecycle in the shape every long-running part of
// turnstile has (internal/startstop): Start and Stop (executor.go), and
// Started, the signal that the fold has caught up with the log.

package executor

import (
	"github.com/turnstile/turnstile/internal/startstop"
)

var _ interface {
	startstop.Service
	startstop.Ender
} = (*Executor)(nil)

// Started is closed once the fold has caught up with the log as it was at
// Start and the previous run's workers have been declared lost (when
// Config.LoseWorkersAtStart): from then on Ready reports true. It is never
// closed if the loop ends first (Done).
func (e *Executor) Started() <-chan struct{} { return e.readied.C() }

// markReady records that the executor is ready: Ready reports it, Started
// is closed.
func (e *Executor) markReady() {
	e.ready.Store(true)
	e.readied.Close()
}
