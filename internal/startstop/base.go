// Base: the lifecycle a long-running part embeds, so that no part writes
// its own start/stop bookkeeping.

package startstop

import (
	"context"
	"sync"
)

// Base is the start/stop state of a part. A part's Start calls StartInit
// first and returns at once when it says so (a second Start does nothing);
// it runs each of its goroutines with Go and closes Started with
// MarkStarted. Stop ends the context StartInit gave and waits for every
// goroutine run with Go. Stop is safe to call more than once, and before
// Start (it then does nothing, and a later Start runs). A stopped part does
// not start again. The zero value is ready to use; it must not be copied.
type Base struct {
	mu      sync.Mutex
	running bool // StartInit succeeded and the part has not been stopped
	stopped bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	ready   Signal
}

// StartInit begins a Start. It returns the context the part runs under
// (Stop ends it) and true, or false when the part was started before (or
// stopped), in which case Start must return without doing anything.
func (b *Base) StartInit(ctx context.Context) (context.Context, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running || b.stopped {
		return nil, false
	}
	b.running = true
	ctx, b.cancel = context.WithCancel(ctx)
	return ctx, true
}

// StartFailed undoes StartInit when Start fails: it ends the context,
// waits for the goroutines already run, and lets a later Start try again.
func (b *Base) StartFailed() {
	b.mu.Lock()
	cancel := b.cancel
	b.cancel, b.running = nil, false
	b.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	b.wg.Wait()
}

// Go runs fn in a goroutine the part owns: Stop waits for it to return.
// Once Stop has begun (a Stop that ran while Start was still going), fn
// still runs, under the context Stop ended, but Stop does not wait for it.
func (b *Base) Go(fn func()) {
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		go fn()
		return
	}
	b.wg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.wg.Done()
		fn()
	}()
}

// MarkStarted closes Started.
func (b *Base) MarkStarted() { b.ready.Close() }

// Started is closed once the part called MarkStarted.
func (b *Base) Started() <-chan struct{} { return b.ready.C() }

// Stop ends the part's context and returns once every goroutine run with
// Go has returned.
func (b *Base) Stop() {
	b.mu.Lock()
	cancel := b.cancel
	if cancel != nil {
		b.stopped = true
	}
	b.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	b.wg.Wait()
}
