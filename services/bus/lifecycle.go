// The forwarder's lifecycle in the shape every long-running part of
// turnstile has (internal/startstop): Start and Stop (bus.go), Started, and
// Err for what stopped it.

package bus

import "github.com/turnstile/turnstile/internal/startstop"

var _ startstop.Service = (*Forwarder)(nil)

// Started is closed once Start has loaded the checkpoint and subscribed.
func (f *Forwarder) Started() <-chan struct{} { return f.started.C() }

// Err is the error that stopped the forwarder, if any other than Stop; it
// is known once Stop has returned.
func (f *Forwarder) Err() error { return f.err }
