package faulty_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/faulty"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

func event(t *testing.T, i int) domain.Envelope {
	t.Helper()
	env, err := codec.Events.Encode(uuid.NewSHA1(uuid.Nil, []byte{byte(i), byte(i >> 8)}),
		domain.WorkerHeartbeat{Incarnation: "i", InFlight: i}, domain.OwnerWorker, "w")
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestRatesAndKinds: over many calls each kind of failure happens at about
// its rate; a refused or timed-out-before append wrote nothing, a
// timed-out-after one wrote its event; the same seed draws the same faults.
func TestRatesAndKinds(t *testing.T) {
	ctx := context.Background()
	run := func() (faulty.Counts, []string) {
		inner := memstore.New(memstore.Options{})
		s, err := faulty.New(inner, faulty.DefaultRates, 42)
		if err != nil {
			t.Fatal(err)
		}
		var trace []string
		const n = 8_000
		for i := range n {
			env := event(t, i)
			before, _ := inner.Head(ctx)
			_, err := s.Append(ctx, "worker-w", eventstore.Any, env)
			after, _ := inner.Head(ctx)
			wrote := after > before
			switch {
			case err == nil && !wrote, errors.Is(err, faulty.ErrResourceExhausted) && wrote:
				t.Fatalf("append %d: err %v, wrote %v", i, err, wrote)
			case errors.Is(err, faulty.ErrTimeout) && wrote:
				trace = append(trace, "after")
			case errors.Is(err, faulty.ErrTimeout):
				trace = append(trace, "before")
			case err != nil:
				trace = append(trace, "exhausted")
			default:
				trace = append(trace, "ok")
			}
			if !errors.Is(err, faulty.ErrTimeout) && err != nil && !errors.Is(err, faulty.ErrResourceExhausted) {
				t.Fatal(err)
			}
			if _, err := s.ReadAll(ctx, 0, 1); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatal(err)
			}
		}
		return s.Counts(), trace
	}
	c, trace := run()
	near := func(what string, got, calls int64, p float64) {
		want := p * float64(calls)
		if math.Abs(float64(got)-want) > 5*math.Sqrt(want) {
			t.Errorf("%s: %d of %d, want about %.0f", what, got, calls, want)
		}
	}
	near("resource exhausted", c.ResourceExhausted, c.Appends, 0.05)
	near("timeouts", c.Timeouts, c.Appends, 0.05)
	near("timeouts after", c.TimeoutsAfter, c.Appends, 0.05)
	near("read timeouts", c.ReadTimeouts, c.Reads, 0.10)
	c2, trace2 := run()
	if c != c2 || len(trace) != len(trace2) {
		t.Fatalf("the same seed drew differently: %+v vs %+v", c, c2)
	}
	for i := range trace {
		if trace[i] != trace2[i] {
			t.Fatalf("call %d: %s, then %s with the same seed", i, trace[i], trace2[i])
		}
	}
}

// TestSubscribeFails: a subscription ends with ErrTimeout at some batch,
// and resubscribing from the next position loses and repeats nothing.
func TestSubscribeFails(t *testing.T) {
	ctx := context.Background()
	inner := memstore.New(memstore.Options{})
	for i := range 300 {
		if _, err := inner.Append(ctx, "worker-w", eventstore.Any, event(t, i)); err != nil {
			t.Fatal(err)
		}
	}
	s, err := faulty.New(inner, faulty.Rates{Read: 0.5}, 1)
	if err != nil {
		t.Fatal(err)
	}
	next, failures := uint64(0), 0
	for next < 300 {
		sctx, cancel := context.WithCancel(ctx)
		err := s.Subscribe(sctx, next, eventstore.Filter{}, func(b []domain.Envelope) error {
			for _, e := range b {
				if e.Position != next {
					t.Fatalf("got position %d, want %d", e.Position, next)
				}
				next++
			}
			if next == 300 {
				cancel()
			}
			return nil
		})
		cancel()
		if errors.Is(err, faulty.ErrTimeout) {
			failures++
		} else if !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	if failures == 0 {
		t.Fatal("no subscription failed at a rate of 50%")
	}
}

func TestBadRates(t *testing.T) {
	for _, r := range []faulty.Rates{{Read: -0.1}, {Read: 1.5}, {ResourceExhausted: 0.5, Timeout: 0.4, TimeoutAfter: 0.2}, {Timeout: math.NaN()}} {
		if _, err := faulty.New(memstore.New(memstore.Options{}), r, 1); err == nil {
			t.Errorf("rates %+v accepted", r)
		}
	}
}

// TestForwardsAtomicMultiStream: the wrapper answers for its inner store,
// so a writer takes the multi-stream path on an atomic store and the
// single-stream one on a store without it (KurrentDB), faults or not.
func TestForwardsAtomicMultiStream(t *testing.T) {
	t.Parallel()
	mem := memstore.New(memstore.Options{})
	for _, c := range []struct {
		inner eventstore.Store
		want  bool
	}{{mem, true}, {storetest.SingleStream(mem), false}} {
		s, err := faulty.New(c.inner, faulty.DefaultRates, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := eventstore.AtomicMultiStream(s); got != c.want {
			t.Errorf("faulty over %T: AtomicMultiStream = %v, want %v", c.inner, got, c.want)
		}
	}
}
