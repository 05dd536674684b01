package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// closeTests: Close returns nil; afterwards every method fails with an error
// matching ErrClosed (Subscribe at once); running subscriptions, idle or inside
// their handler, end with ErrClosed; closing again does not panic and returns
// nil or ErrClosed.
func (s suite) closeTests() []subtest {
	return []subtest{
		{name: "CallsFailAfterClose", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			mustAppend(t, ctx, st, "execution-c", eventstore.NoStream, NewEvent("test.c", nil))
			if err := st.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			_, err := st.Append(ctx, "execution-c", eventstore.Any, NewEvent("test.c", nil))
			requireErrorIs(t, err, eventstore.ErrClosed, "Append after Close")
			_, err = st.AppendMulti(ctx, eventstore.StreamAppend{Stream: "execution-c", Expected: eventstore.Any, Events: NewEvents("test.c", 1)})
			requireErrorIs(t, err, eventstore.ErrClosed, "AppendMulti after Close")
			_, err = st.ReadStream(ctx, "execution-c", 0, 10)
			requireErrorIs(t, err, eventstore.ErrClosed, "ReadStream after Close")
			_, err = st.ReadAll(ctx, 0, 10)
			requireErrorIs(t, err, eventstore.ErrClosed, "ReadAll after Close")
			_, err = st.Head(ctx)
			requireErrorIs(t, err, eventstore.ErrClosed, "Head after Close")
			done := make(chan error, 1)
			go func() {
				done <- st.Subscribe(ctx, 0, eventstore.Filter{}, func([]domain.Envelope) error { return nil })
			}()
			select {
			case err := <-done:
				requireErrorIs(t, err, eventstore.ErrClosed, "Subscribe after Close")
			case <-time.After(promptly):
				t.Fatalf("Subscribe on a closed store did not return within %v", promptly)
			}
		}},
		{name: "EndsSubscriptions", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			mustAppend(t, ctx, st, "execution-c", eventstore.NoStream, NewEvent("test.c", nil))
			idle := s.startSink(ctx, st, 0, eventstore.Filter{}, 1000)
			waitCount(t, ctx, idle, 1) // caught up, waiting for live events
			release := make(chan struct{})
			busy := s.startSink(ctx, st, 0, eventstore.Filter{}, 1000, func(k *sink) { k.release = release })
			busy.waitEntered(t, ctx) // inside its handler
			if err := st.Close(); err != nil {
				close(release)
				t.Fatalf("Close: %v", err)
			}
			close(release)
			for name, k := range map[string]*sink{"idle": idle, "busy": busy} {
				select {
				case <-k.done:
					if !errors.Is(k.err, eventstore.ErrClosed) {
						t.Errorf("%s subscription ended with %v after Close, want ErrClosed", name, k.err)
					}
				case <-time.After(promptly):
					k.cancel()
					select {
					case <-k.done:
						t.Errorf("%s subscription did not return within %v of Close (it did once cancelled, after %d events)", name, promptly, k.count())
					case <-time.After(promptly):
						t.Errorf("%s subscription did not return within %v of Close, nor within %v of its context's end (after %d events)", name, promptly, promptly, k.count())
					}
				}
			}
		}},
		{name: "CloseTwice", run: func(t *testing.T, st eventstore.Store) {
			if err := st.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := st.Close(); err != nil && !errors.Is(err, eventstore.ErrClosed) {
				t.Fatalf("second Close: %v, want nil or ErrClosed", err)
			}
			_, err := st.Head(context.Background())
			requireErrorIs(t, err, eventstore.ErrClosed, "Head after two Closes")
		}},
	}
}
