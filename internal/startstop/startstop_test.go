package startstop_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/internal/startstop"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFuncLifecycle(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var stopped atomic.Bool
	f := startstop.NewFunc(func(ctx context.Context, started func()) error {
		<-release
		started()
		<-ctx.Done()
		stopped.Store(true)
		return nil
	})
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := f.Start(context.Background()); !errors.Is(err, startstop.ErrStarted) {
		t.Fatalf("second Start: %v, want ErrStarted", err)
	}
	select {
	case <-f.Started():
		t.Fatal("Started closed before the function said so")
	case <-time.After(10 * time.Millisecond):
	}
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := startstop.WaitAllStarted(ctx, f, nil); err != nil {
		t.Fatal(err)
	}
	startstop.StopAllParallel(f, nil)
	if !stopped.Load() {
		t.Fatal("Stop returned before the function did")
	}
	f.Stop() // a second Stop is harmless
}

func TestWaitAllStartedSeesAnEnd(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	f := startstop.NewFunc(func(context.Context, func()) error { return boom })
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := startstop.WaitAllStarted(ctx, f); !errors.Is(err, startstop.ErrEnded) {
		t.Fatalf("WaitAllStarted: %v, want ErrEnded", err)
	}
	if !errors.Is(f.Err(), boom) {
		t.Fatalf("Err: %v, want boom", f.Err())
	}
}

func TestWaitAllStartedEndsWithCtx(t *testing.T) {
	t.Parallel()
	f := startstop.NewFunc(func(ctx context.Context, _ func()) error { <-ctx.Done(); return nil })
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := startstop.WaitAllStarted(ctx, f); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitAllStarted: %v, want the deadline", err)
	}
}

func TestStopAllOrder(t *testing.T) {
	t.Parallel()
	var order []int
	mk := func(i int) *startstop.Func {
		f := startstop.NewFunc(func(ctx context.Context, started func()) error {
			started()
			<-ctx.Done()
			order = append(order, i)
			return nil
		})
		if err := f.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b := mk(1), mk(2)
	startstop.StopAll(a, b)
	if len(order) != 2 || order[0] != 2 || order[1] != 1 {
		t.Fatalf("stop order %v, want [2 1]", order)
	}
}
