// Package faulty wraps an eventstore.Store and makes some of its calls fail,
// at seeded random, the way a real backend under load or behind a flaky
// network does. The default rates are those Temporal uses for its own
// persistence tests: of the appends, 5% are refused as resource-exhausted,
// 5% time out before they are executed and 5% are executed and then time
// out (the writer cannot tell them from the previous kind); 10% of the reads
// time out. A writer that survives this must retry on event ids and
// expected versions, not on luck.
package faulty

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// Injected errors. ErrTimeout wraps context.DeadlineExceeded, as a client's
// timeout does.
var (
	ErrResourceExhausted = errors.New("faulty: resource exhausted (injected)")
	ErrTimeout           = fmt.Errorf("faulty: timed out (injected): %w", context.DeadlineExceeded)
)

// Rates are the probabilities, each in [0, 1], of the injected failures.
// For an append, the three kinds are exclusive: their sum must be at most 1.
type Rates struct {
	ResourceExhausted float64 // an append refused before it is executed
	Timeout           float64 // an append that times out before it is executed
	TimeoutAfter      float64 // an append executed, then reported as timed out
	Read              float64 // a read (ReadStream, ReadAll, Head, a subscription's start or one of its batches) that times out
}

// DefaultRates are Temporal's persistence-test rates.
var DefaultRates = Rates{ResourceExhausted: 0.05, Timeout: 0.05, TimeoutAfter: 0.05, Read: 0.10}

// Validate checks that the rates are probabilities.
func (r Rates) Validate() error {
	for _, p := range []float64{r.ResourceExhausted, r.Timeout, r.TimeoutAfter, r.Read} {
		if p < 0 || p > 1 || p != p {
			return fmt.Errorf("faulty: rate %v is not in [0, 1]", p)
		}
	}
	if s := r.ResourceExhausted + r.Timeout + r.TimeoutAfter; s > 1 {
		return fmt.Errorf("faulty: append rates sum to %v > 1", s)
	}
	return nil
}

// Counts says how many failures were injected, and of how many calls.
type Counts struct {
	Appends, Reads                                           int64
	ResourceExhausted, Timeouts, TimeoutsAfter, ReadTimeouts int64
}

// Store is a Store that fails some calls. Safe for concurrent use; with
// concurrent callers, which call draws which number depends on scheduling,
// so only a single caller replays exactly.
type Store struct {
	inner eventstore.Store

	mu    sync.Mutex
	rng   *rand.Rand
	rates Rates
	on    atomic.Bool

	appends, reads, exhausted, timeouts, after, readTimeouts atomic.Int64
}

var _ eventstore.Store = (*Store)(nil)

// New wraps inner with the given rates and seed; failures are on at once.
func New(inner eventstore.Store, rates Rates, seed uint64) (*Store, error) {
	if err := rates.Validate(); err != nil {
		return nil, err
	}
	s := &Store{inner: inner, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), rates: rates}
	s.on.Store(true)
	return s, nil
}

// Inner returns the wrapped store.
func (s *Store) Inner() eventstore.Store { return s.inner }

// AtomicMultiStream implements eventstore.MultiStreamReporter: the inner
// store's answer (an injected failure writes nothing, or all).
func (s *Store) AtomicMultiStream() bool { return eventstore.AtomicMultiStream(s.inner) }

// SetEnabled turns the failures on or off (say, off to check the log at the end).
func (s *Store) SetEnabled(on bool) { s.on.Store(on) }

// SetRates replaces the rates.
func (s *Store) SetRates(r Rates) error {
	if err := r.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	s.rates = r
	s.mu.Unlock()
	return nil
}

// Counts returns what was injected so far.
func (s *Store) Counts() Counts {
	return Counts{Appends: s.appends.Load(), Reads: s.reads.Load(), ResourceExhausted: s.exhausted.Load(),
		Timeouts: s.timeouts.Load(), TimeoutsAfter: s.after.Load(), ReadTimeouts: s.readTimeouts.Load()}
}

type appendFault uint8

const (
	noFault appendFault = iota
	exhausted
	timeoutBefore
	timeoutAfter
)

func (s *Store) drawAppend() appendFault {
	s.appends.Add(1)
	if !s.on.Load() {
		return noFault
	}
	s.mu.Lock()
	u, r := s.rng.Float64(), s.rates
	s.mu.Unlock()
	switch {
	case u < r.ResourceExhausted:
		s.exhausted.Add(1)
		return exhausted
	case u < r.ResourceExhausted+r.Timeout:
		s.timeouts.Add(1)
		return timeoutBefore
	case u < r.ResourceExhausted+r.Timeout+r.TimeoutAfter:
		s.after.Add(1)
		return timeoutAfter
	}
	return noFault
}

// readFails draws whether a read times out.
func (s *Store) readFails() bool {
	s.reads.Add(1)
	if !s.on.Load() {
		return false
	}
	s.mu.Lock()
	fail := s.rng.Float64() < s.rates.Read
	s.mu.Unlock()
	if fail {
		s.readTimeouts.Add(1)
	}
	return fail
}

// Append implements eventstore.Store, failing as AppendMulti does.
func (s *Store) Append(ctx context.Context, stream string, expected eventstore.ExpectedVersion, events ...domain.Envelope) (eventstore.AppendResult, error) {
	return s.AppendMulti(ctx, eventstore.StreamAppend{Stream: stream, Expected: expected, Events: events})
}

// AppendMulti implements eventstore.Store: it may refuse the append
// (ErrResourceExhausted), time out before it (ErrTimeout), or execute it
// and then report ErrTimeout.
func (s *Store) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	switch s.drawAppend() {
	case exhausted:
		return eventstore.AppendResult{}, ErrResourceExhausted
	case timeoutBefore:
		return eventstore.AppendResult{}, ErrTimeout
	case timeoutAfter:
		if _, err := s.inner.AppendMulti(ctx, appends...); err != nil {
			return eventstore.AppendResult{}, err
		}
		return eventstore.AppendResult{}, ErrTimeout
	}
	return s.inner.AppendMulti(ctx, appends...)
}

// ReadStream implements eventstore.Store; it may time out.
func (s *Store) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]domain.Envelope, error) {
	if s.readFails() {
		return nil, ErrTimeout
	}
	return s.inner.ReadStream(ctx, stream, from, limit)
}

// ReadAll implements eventstore.Store; it may time out.
func (s *Store) ReadAll(ctx context.Context, from uint64, limit int) ([]domain.Envelope, error) {
	if s.readFails() {
		return nil, ErrTimeout
	}
	return s.inner.ReadAll(ctx, from, limit)
}

// Head implements eventstore.Store; it may time out.
func (s *Store) Head(ctx context.Context) (uint64, error) {
	if s.readFails() {
		return 0, ErrTimeout
	}
	return s.inner.Head(ctx)
}

// Subscribe implements eventstore.Store. The subscription may fail to
// start, and may end with ErrTimeout before any batch it would deliver, as a
// subscription that reads the log page by page does; the subscriber then
// subscribes again from where it was.
func (s *Store) Subscribe(ctx context.Context, from uint64, filter eventstore.Filter, handle func([]domain.Envelope) error) error {
	if s.readFails() {
		return ErrTimeout
	}
	return s.inner.Subscribe(ctx, from, filter, func(b []domain.Envelope) error {
		if s.readFails() {
			return ErrTimeout
		}
		return handle(b)
	})
}

// Close implements eventstore.Store: it closes the wrapped store.
func (s *Store) Close() error { return s.inner.Close() }
