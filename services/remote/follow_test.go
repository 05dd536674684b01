package remote_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/services/remote"
)

// TestFollowerOutlivesAFailedSubscription: the follower's subscription
// fails twice (at once, then after its first batch), as PostgreSQL's does
// when a query fails; the service follows the log again from where it
// stopped, so a session is still handed what the log hands it. Before, the
// follower ended at the first failure, and no session was handed anything
// more until the server restarted.
func TestFollowerOutlivesAFailedSubscription(t *testing.T) {
	t.Parallel()
	mem := memstore.New(memstore.Options{})
	store := &failingSubs{Store: mem}
	rs, err := remote.New(remote.Config{Store: store, Lease: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := rs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-rs.Started()
	t.Cleanup(func() {
		rs.Stop()
		cancel()
		_ = mem.Close()
	})
	f := &fixture{store: store, rs: rs}
	ss := f.register(t)
	for _, id := range []string{"x1", "x2"} {
		f.request(t, id)
		f.hand(t, id, ss.Incarnation())
	}
	f.pollFor(t, ss, "x1", "x2") // through the second subscription, which then fails
	f.request(t, "x3")
	f.hand(t, "x3", ss.Incarnation())
	f.pollFor(t, ss, "x3") // through the third
	if n := store.calls.Load(); n != 3 {
		t.Fatalf("%d subscriptions: want the two that failed and one more", n)
	}
	res, err := rs.Poll(context.Background(), ss, -1, 0)
	if err != nil || len(res.Assignments) != 3 {
		t.Fatalf("poll again: %+v, %v; want x1, x2 and x3", res, err)
	}
}

// failingSubs fails its first subscription at once and its second after
// the first batch it delivers.
type failingSubs struct {
	eventstore.Store
	calls atomic.Int32
}

func (f *failingSubs) AtomicMultiStream() bool { return eventstore.AtomicMultiStream(f.Store) }

func (f *failingSubs) Subscribe(ctx context.Context, from uint64, filter eventstore.Filter, handle func([]domain.Envelope) error) error {
	switch f.calls.Add(1) {
	case 1:
		return errors.New("connection reset by peer (test)")
	case 2:
		errDropped := errors.New("subscription dropped (test)")
		err := f.Store.Subscribe(ctx, from, filter, func(batch []domain.Envelope) error {
			if err := handle(batch); err != nil {
				return err
			}
			return errDropped
		})
		return err
	}
	return f.Store.Subscribe(ctx, from, filter, handle)
}
