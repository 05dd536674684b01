package executor

import (
	"sync"
	"sync/atomic"
	"time"
)

// writers runs the executor's background appends (runAsync) on goroutines
// it keeps for the next ones. A goroutine started per append grew its stack
// into the store's call chain every time: 3 % of a busy executor's CPU.
type writers struct {
	work    chan func()
	wg      sync.WaitGroup
	started atomic.Int64 // goroutines started (for tests)
}

// writerIdle is how long an idle writer goroutine waits for work before it
// ends.
const writerIdle = time.Second

func newWriters() *writers { return &writers{work: make(chan func())} }

// run runs f on an idle goroutine of the pool, or on a new one.
func (p *writers) run(f func()) {
	select {
	case p.work <- f:
	default:
		p.wg.Add(1)
		p.started.Add(1)
		go p.loop(f)
	}
}

func (p *writers) loop(f func()) {
	defer p.wg.Done()
	idle := time.NewTimer(writerIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(writerIdle)
		select {
		case next, ok := <-p.work:
			if !ok {
				return
			}
			f = next
		case <-idle.C:
			return
		}
	}
}

// close ends the pool's goroutines once they are idle. Nothing may be run
// after it.
func (p *writers) close() {
	close(p.work)
	p.wg.Wait()
}
