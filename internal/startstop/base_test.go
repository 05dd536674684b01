package startstop_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/internal/startstop"
)

// part is the smallest part built on Base: one goroutine until Stop.
type part struct {
	startstop.Base
	starts int
	ended  atomic.Bool // its goroutine returned
}

func (p *part) Start(ctx context.Context) error {
	ctx, ok := p.StartInit(ctx)
	if !ok {
		return nil
	}
	p.starts++
	p.Go(func() {
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // a part that takes a while to end
		p.ended.Store(true)
	})
	p.MarkStarted()
	return nil
}

var _ startstop.Service = (*part)(nil)

// TestBase: a second Start does nothing (no second goroutine), Stop waits
// for the goroutine, Stop twice and Stop before Start are fine, and a
// stopped part does not start again.
func TestBase(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := &part{}
	p.Stop() // before Start
	ctx := context.Background()
	_ = p.Start(ctx)
	_ = p.Start(ctx)
	if p.starts != 1 {
		t.Fatalf("two Starts ran %d times, want once", p.starts)
	}
	<-p.Started()
	p.Stop()
	if !p.ended.Load() {
		t.Fatal("Stop returned before the part's goroutine did")
	}
	p.Stop()
	_ = p.Start(ctx)
	if p.starts != 1 {
		t.Fatal("a stopped part started again")
	}
}

// TestBaseStartFailed: after StartFailed a later Start runs.
func TestBaseStartFailed(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var b startstop.Base
	ctx, ok := b.StartInit(context.Background())
	if !ok {
		t.Fatal("first StartInit refused")
	}
	b.Go(func() { <-ctx.Done() })
	b.StartFailed() // ends ctx and waits for the goroutine
	if _, ok := b.StartInit(context.Background()); !ok {
		t.Fatal("StartInit refused after StartFailed")
	}
	b.Stop()
}

// TestBaseStopDuringStart: a Stop that comes while Start is still going
// ends the context Start got; a goroutine Start runs after it still runs,
// sees that context ended, and nothing panics.
func TestBaseStopDuringStart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var b startstop.Base
	ctx, ok := b.StartInit(context.Background())
	if !ok {
		t.Fatal("StartInit refused")
	}
	b.Stop()
	ran := make(chan error, 1)
	b.Go(func() { ran <- ctx.Err() })
	if err := <-ran; err == nil {
		t.Fatal("a goroutine run after Stop got a live context")
	}
	b.Stop()
}
