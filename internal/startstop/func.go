// Func: the Service shape around a blocking function, for parts written
// as a loop that runs until its context ends.

package startstop

import (
	"context"
	"errors"
	"sync"
)

// Func runs a blocking function as a Service. The function runs until its
// ctx ends (Stop ends it) or it returns by itself; it calls started once
// the part is ready.
type Func struct {
	run func(ctx context.Context, started func()) error

	mu        sync.Mutex
	cancel    context.CancelFunc
	ready     chan struct{}
	readyOnce sync.Once
	done      chan struct{}
	err       error
}

// NewFunc returns a Service that runs run from Start until Stop. run must
// return once its ctx ends; an error it returns then is kept for Err.
func NewFunc(run func(ctx context.Context, started func()) error) *Func {
	return &Func{run: run, ready: make(chan struct{}), done: make(chan struct{})}
}

// ErrStarted is returned by Start when the Service was started before.
var ErrStarted = errors.New("startstop: already started")

// Start runs the function in a goroutine of its own.
func (f *Func) Start(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel != nil {
		return ErrStarted
	}
	ctx, f.cancel = context.WithCancel(ctx)
	go func() {
		defer close(f.done)
		f.err = f.run(ctx, func() { f.readyOnce.Do(func() { close(f.ready) }) })
	}()
	return nil
}

// Started is closed once the function has called started.
func (f *Func) Started() <-chan struct{} { return f.ready }

// Done is closed once the function has returned.
func (f *Func) Done() <-chan struct{} { return f.done }

// Err is what the function returned; nil until Done is closed.
func (f *Func) Err() error {
	select {
	case <-f.done:
		return f.err
	default:
		return nil
	}
}

// Stop ends the function's ctx and waits for it to return.
func (f *Func) Stop() {
	f.mu.Lock()
	cancel := f.cancel
	f.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-f.done
}
