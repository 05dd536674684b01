// Func: the Service shape around a blocking function, for parts written
// as a loop that runs until its context ends.

package startstop

import (
	"context"
	"errors"
)

// Func runs a blocking function as a Service. The function runs until its
// ctx ends (Stop ends it) or it returns by itself; it calls started once
// the part is ready.
type Func struct {
	run  func(ctx context.Context, started func()) error
	life Base
	done chan struct{}
	err  error
}

// NewFunc returns a Service that runs run from Start until Stop. run must
// return once its ctx ends; an error it returns then is kept for Err.
func NewFunc(run func(ctx context.Context, started func()) error) *Func {
	return &Func{run: run, done: make(chan struct{})}
}

// ErrStarted is returned by Start when the Service was started before.
var ErrStarted = errors.New("startstop: already started")

// Start runs the function in a goroutine of its own; a second Start runs
// nothing and returns ErrStarted.
func (f *Func) Start(ctx context.Context) error {
	ctx, ok := f.life.StartInit(ctx)
	if !ok {
		return ErrStarted
	}
	f.life.Go(func() {
		defer close(f.done)
		f.err = f.run(ctx, f.life.MarkStarted)
	})
	return nil
}

// Started is closed once the function has called started.
func (f *Func) Started() <-chan struct{} { return f.life.Started() }

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
func (f *Func) Stop() { f.life.Stop() }
