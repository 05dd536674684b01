// The forwarder's lifecycle in the shape every long-running part of
// turnstile has (internal/startstop.Base): Start (bus.go), Started (closed
// once Start has loaded the checkpoint), Stop (ends forwarding, saving the
// checkpoint), and Err for what stopped it.

package bus

import "github.com/turnstile/turnstile/internal/startstop"

var _ startstop.Service = (*Forwarder)(nil)

// Err is the error that stopped the forwarder, if any other than Stop; it
// is known once Stop has returned.
func (f *Forwarder) Err() error { return f.err }
