package storetest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// collect subscribes from the given position with filter until n events have
// arrived, then cancels and checks that Subscribe returned context.Canceled.
// It checks that batches are never empty and the handler is never called
// concurrently.
func collect(t *testing.T, ctx context.Context, st eventstore.Store, from uint64, filter eventstore.Filter, n int) []domain.Envelope {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var got []domain.Envelope
	var inHandler atomic.Bool
	var bad error
	err := st.Subscribe(ctx, from, filter, func(batch []domain.Envelope) error {
		if !inHandler.CompareAndSwap(false, true) {
			bad = errors.New("handler called concurrently")
		}
		defer inHandler.Store(false)
		if len(batch) == 0 {
			bad = errors.New("handler called with an empty batch")
		}
		got = append(got, batch...)
		if len(got) >= n {
			cancel()
		}
		return nil
	})
	if bad != nil {
		t.Fatalf("Subscribe: %v", bad)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Subscribe after its context was cancelled returned %v, want context.Canceled (got %d of %d events)", err, len(got), n)
	}
	if len(got) != n {
		t.Fatalf("Subscribe delivered %d events, want %d", len(got), n)
	}
	_ = time.Second
	return got
}
