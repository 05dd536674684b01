// Package startstop gives every long-running part of turnstile one
// lifecycle: Start(ctx) returns once the part runs, Started is closed once
// it is ready (readiness is a signal, never polled), Stop ends it and
// returns once it has. A part embeds Base for that bookkeeping. Helpers wait
// for several parts or stop them at once.
//
// The shape follows river's rivershared/startstop.
package startstop

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Service is a long-running part of a process.
type Service interface {
	// Start starts the part and returns once it runs (not necessarily
	// ready). It fails when the part cannot start; ending ctx stops it.
	Start(ctx context.Context) error
	// Started is closed once the part is ready to serve.
	Started() <-chan struct{}
	// Stop ends the part and returns once it has. It is safe to call
	// more than once, and on a part that never started.
	Stop()
}

// Ender is a Service that can end by itself (a failure): Done is closed
// once it has. WaitAllStarted watches it, so a part that ends before it is
// ready fails the wait instead of hanging it.
type Ender interface {
	Done() <-chan struct{}
}

// ErrEnded is returned by WaitAllStarted when a part ended before it was ready.
var ErrEnded = errors.New("startstop: ended before it was ready")

// WaitAllStarted waits until every service (nil ones are skipped) is
// ready, one that is an Ender ends first (ErrEnded), or ctx ends.
func WaitAllStarted(ctx context.Context, services ...Service) error {
	for i, s := range services {
		if s == nil {
			continue
		}
		var done <-chan struct{}
		if e, ok := s.(Ender); ok {
			done = e.Done()
		}
		select {
		case <-s.Started():
		case <-done:
			select {
			case <-s.Started(): // ready, then ended: still ready once
			default:
				return fmt.Errorf("service %d (%T): %w", i, s, ErrEnded)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// StopAllParallel stops every service (nil ones are skipped) at the same
// time and returns once all have stopped.
func StopAllParallel(services ...Service) {
	var wg sync.WaitGroup
	for _, s := range services {
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Stop()
		}()
	}
	wg.Wait()
}

// StopAll stops the services one after the other, last first (the reverse
// of the order they were started in).
func StopAll(services ...Service) {
	for i := len(services) - 1; i >= 0; i-- {
		if services[i] != nil {
			services[i].Stop()
		}
	}
}
