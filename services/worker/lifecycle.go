// The worker's lifecycle in the shape every long-running part of turnstile
// has (internal/startstop): Start and Stop (worker.go), Drain for a stop
// with a grace period of its own, and Started, the signal that the worker
// listens and is registered.

package worker

import (
	"github.com/turnstile/turnstile/internal/startstop"
)

var _ startstop.Service = (*Worker)(nil)

// Started is closed once Start has subscribed to the worker's topics and
// registered its incarnation: from then on handoffs reach it.
func (w *Worker) Started() <-chan struct{} { return w.life.Started() }
