// Package gopool runs short functions on goroutines it keeps for the next
// ones. A goroutine started per function grows its stack anew each time
// (from a few KB, copying it at every doubling) when the function calls
// deep, as an append into a store does; a goroutine kept from the last
// function has its stack grown already.
package gopool

import (
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs functions on goroutines it keeps. The zero value is not
// usable; see New.
type Pool struct {
	work    chan func()
	idle    time.Duration
	done    <-chan struct{}
	wg      sync.WaitGroup
	started atomic.Int64
}

// New returns a pool whose goroutines wait up to idle for the next
// function, and end when idle passes without one or when done is closed
// (nil: never).
func New(idle time.Duration, done <-chan struct{}) *Pool {
	return &Pool{work: make(chan func()), idle: idle, done: done}
}

// Go runs f on an idle goroutine of the pool, or on a new one. It never
// blocks, and may be called after done is closed (f then runs on a
// goroutine that ends after it).
func (p *Pool) Go(f func()) {
	select {
	case p.work <- f:
	default:
		p.wg.Add(1)
		p.started.Add(1)
		go p.loop(f)
	}
}

// Started returns how many goroutines the pool has started.
func (p *Pool) Started() int64 { return p.started.Load() }

// Wait waits until every goroutine of the pool has ended: after done is
// closed, once their functions have returned.
func (p *Pool) Wait() { p.wg.Wait() }

func (p *Pool) loop(f func()) {
	defer p.wg.Done()
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		f()
		t.Reset(p.idle)
		select {
		case f = <-p.work:
		case <-t.C:
			return
		case <-p.done:
			return
		}
	}
}
