package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// promptly is how long Subscribe may take to return after its context ends or
// the store closes.
const promptly = 5 * time.Second

// stall is how long a subscription that still owes events may go without
// delivering any before the suite gives up on it.
const stall = 10 * time.Second

// sink runs one Subscribe in a goroutine and checks every delivery: batches are
// never empty, the handler is never called concurrently, events pass the
// filter, arrive at or after from, in strictly increasing position order, with
// no id twice, and (with dense positions and no filter) with no hole. When it
// has want events it cancels its subscription.
type sink struct {
	s      suite
	from   uint64
	filter eventstore.Filter
	want   int
	delay  time.Duration // sleep in the handler, to play a slow subscriber

	cancel  context.CancelFunc
	entered chan struct{} // closed when the handler is first called
	once    sync.Once
	release chan struct{} // if not nil, the first call waits for it
	done    chan struct{} // closed when Subscribe has returned, with err
	err     error

	mu       sync.Mutex
	events   []domain.Envelope
	ids      map[string]struct{}
	bad      error
	inHandle bool
}

func (s suite) startSink(ctx context.Context, st eventstore.Store, from uint64, filter eventstore.Filter, want int, configure ...func(*sink)) *sink {
	k := &sink{
		s: s, from: from, filter: filter, want: want,
		entered: make(chan struct{}),
		done:    make(chan struct{}),
		ids:     make(map[string]struct{}),
	}
	for _, c := range configure {
		c(k)
	}
	ctx, k.cancel = context.WithCancel(ctx)
	go func() {
		k.err = st.Subscribe(ctx, from, filter, k.handle)
		close(k.done)
	}()
	return k
}

func (k *sink) handle(batch []domain.Envelope) error {
	k.mu.Lock()
	if k.inHandle {
		k.fail(errors.New("handler called concurrently"))
	}
	k.inHandle = true
	k.mu.Unlock()
	k.once.Do(func() {
		close(k.entered)
		if k.release != nil {
			<-k.release
		}
	})
	if k.delay > 0 {
		time.Sleep(k.delay)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.inHandle = false
	if len(batch) == 0 {
		k.fail(errors.New("handler called with an empty batch"))
	}
	for i := range batch {
		e := &batch[i]
		id := e.ID.String()
		switch _, dup := k.ids[id]; {
		case dup:
			k.fail(fmt.Errorf("event %s (position %d) delivered twice", id, e.Position))
		case e.Position < k.from:
			k.fail(fmt.Errorf("event at position %d delivered to a subscription from %d", e.Position, k.from))
		case !k.filter.Match(e):
			k.fail(fmt.Errorf("event %s of stream %q, type %q does not pass the filter %+v", id, e.Stream, e.Type, k.filter))
		}
		dense := k.s.caps.DensePositions && len(k.filter.StreamPrefixes) == 0 && len(k.filter.Types) == 0
		if n := len(k.events); n > 0 {
			prev := k.events[n-1].Position
			if e.Position <= prev {
				k.fail(fmt.Errorf("event at position %d delivered after position %d", e.Position, prev))
			}
			if dense && e.Position != prev+1 {
				k.fail(fmt.Errorf("event at position %d delivered right after position %d: a gap", e.Position, prev))
			}
		} else if dense && e.Position != k.from {
			k.fail(fmt.Errorf("first event delivered has position %d, want %d: the subscription skipped the start", e.Position, k.from))
		}
		k.ids[id] = struct{}{}
		k.events = append(k.events, *e)
	}
	if len(k.events) >= k.want {
		k.cancel()
	}
	return nil
}

// fail records the first violation. k.mu must be held.
func (k *sink) fail(err error) {
	if k.bad == nil {
		k.bad = err
	}
}

func (k *sink) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.events)
}

// wait waits for the subscription to end, which it does by itself once it has
// want events, and checks that it ended with context.Canceled and no violation.
func (k *sink) wait(t *testing.T, ctx context.Context) []domain.Envelope {
	t.Helper()
	defer k.cancel()
	waitCount(t, ctx, k, k.want)
	select {
	case <-k.done:
	case <-time.After(promptly):
		t.Fatalf("subscription from %d did not return within %v of its context being cancelled", k.from, promptly)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.bad != nil {
		t.Fatalf("subscription from %d (filter %+v): %v", k.from, k.filter, k.bad)
	}
	if !errors.Is(k.err, context.Canceled) {
		t.Fatalf("subscription from %d ended with %v after %d of %d events, want context.Canceled", k.from, k.err, len(k.events), k.want)
	}
	if len(k.events) != k.want {
		t.Fatalf("subscription from %d got %d events, want %d", k.from, len(k.events), k.want)
	}
	return k.events
}

// waitEntered waits until the handler has been called once.
func (k *sink) waitEntered(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-k.entered:
	case <-k.done:
		t.Fatalf("subscription ended with %v before its first delivery", k.err)
	case <-ctx.Done():
		t.Fatalf("subscription from %d (filter %+v) got no event before the test timed out (%v)", k.from, k.filter, testTimeout)
	}
}

// collect subscribes from the given position with filter until n events have
// arrived, with every check of sink, and returns them.
func collect(t *testing.T, ctx context.Context, st eventstore.Store, from uint64, filter eventstore.Filter, n int) []domain.Envelope {
	t.Helper()
	return suite{}.startSink(ctx, st, from, filter, n).wait(t, ctx)
}

// filterLog returns the events of evs that pass f.
func filterLog(evs []domain.Envelope, f eventstore.Filter) []domain.Envelope {
	var out []domain.Envelope
	for i := range evs {
		if f.Match(&evs[i]) {
			out = append(out, evs[i])
		}
	}
	return out
}

// subscribeTests: Subscribe catches up then goes live with no gap, no
// duplicate and no reordering, also while 16 writers commit concurrently (it
// then matches ReadAll exactly); it starts at any position; filters by stream
// prefix and by type, skipping long runs of other events; ends with the
// handler's error, or with context.Canceled promptly when its context ends; and
// a slow or stuck subscriber neither blocks writers nor loses events.
func (s suite) subscribeTests() []subtest {
	return []subtest{
		{name: "CatchUpThenLive", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			writeMixed(t, ctx, st, 10)
			k := s.startSink(ctx, st, 0, eventstore.Filter{}, 15)
			waitCount(t, ctx, k, 10)
			writeMixed(t, ctx, st, 5)
			got := k.wait(t, ctx)
			requireSameEvents(t, "Subscribe against ReadAll", readAll(t, ctx, st), got)
		}},
		{name: "LiveOnEmptyLog", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			k := s.startSink(ctx, st, 0, eventstore.Filter{}, 6)
			for i := range 6 {
				mustAppend(t, ctx, st, "execution-live", eventstore.Any, NewEvent("test.live", i))
				waitCount(t, ctx, k, i+1) // each one is delivered while the next is not yet written
			}
			requireSameEvents(t, "Subscribe against ReadAll", readAll(t, ctx, st), k.wait(t, ctx))
		}},
		{name: "ConcurrentWriters", slow: true, run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			const writers, each = 16, 500
			marker := NewEvent("test.start", nil)
			mustAppend(t, ctx, st, "execution-start", eventstore.NoStream, marker)
			total := 1 + writers*each
			early := s.startSink(ctx, st, 0, eventstore.Filter{}, total)
			early.waitEntered(t, ctx) // live before the writers start
			var late *sink
			written, err := writeConcurrently(ctx, st, writers, each,
				func(w int) string { return fmt.Sprintf("execution-%d", w%8) }, // two writers per stream
				func(w, i int) {
					if w == 0 && i == each/4 {
						// A second subscription joins mid-way: catch-up
						// while writers commit, then live.
						late = s.startSink(ctx, st, 0, eventstore.Filter{}, total)
					}
				})
			if err != nil {
				t.Fatal(err)
			}
			all := readAll(t, ctx, st)
			if len(all) != total {
				t.Fatalf("log holds %d events, want %d", len(all), total)
			}
			s.requireLogShape(t, "ReadAll after concurrent writers", all)
			requireResults(t, all, written)
			requireSameEvents(t, "subscription opened before the writers, against ReadAll", all, early.wait(t, ctx))
			if late == nil {
				t.Fatal("the second subscription was never started")
			}
			requireSameEvents(t, "subscription opened mid-way, against ReadAll", all, late.wait(t, ctx))
		}},
		{name: "FromMiddle", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			writeMixed(t, ctx, st, 10)
			before := readAll(t, ctx, st)
			from := before[4].Position
			k := s.startSink(ctx, st, from, eventstore.Filter{}, 9)
			waitCount(t, ctx, k, 6)
			writeMixed(t, ctx, st, 3)
			all := readAll(t, ctx, st)
			requireSameEvents(t, fmt.Sprintf("Subscribe from position %d (inclusive)", from), all[4:], k.wait(t, ctx))
		}},
		{name: "FromHead", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			writeMixed(t, ctx, st, 5)
			h := mustHead(t, ctx, st)
			k := s.startSink(ctx, st, h, eventstore.Filter{}, 2)
			writeMixed(t, ctx, st, 2)
			all := readAll(t, ctx, st)
			requireSameEvents(t, "Subscribe from Head", all[5:], k.wait(t, ctx))
		}},
		{name: "FromBeyondHead", run: func(t *testing.T, st eventstore.Store) {
			s.needDense(t)
			ctx := testContext(t)
			writeMixed(t, ctx, st, 3)
			k := s.startSink(ctx, st, 5, eventstore.Filter{}, 2)
			writeMixed(t, ctx, st, 4) // positions 3 to 6
			all := readAll(t, ctx, st)
			requireSameEvents(t, "Subscribe from position 5 while the log ended at 3", all[5:], k.wait(t, ctx))
		}},
		{name: "HandlerMayUseStore", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			// A reactor: the handler appends and reads while handling, as the
			// executor does. A backend that holds a lock around the handler
			// deadlocks here.
			mustAppend(t, ctx, st, "execution-cmd", eventstore.NoStream, NewEvent("test.cmd", nil))
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var got []domain.Envelope
			done := make(chan error, 1)
			go func() {
				done <- st.Subscribe(sctx, 0, eventstore.Filter{}, func(batch []domain.Envelope) error {
					for _, e := range batch {
						got = append(got, e)
						if e.Type != "test.cmd" {
							continue
						}
						if _, err := st.Append(ctx, "execution-reaction", eventstore.Any, NewEvent("test.reaction", nil)); err != nil {
							return fmt.Errorf("append in handler: %w", err)
						}
						if _, err := st.ReadStream(ctx, "execution-reaction", 0, 10); err != nil {
							return fmt.Errorf("read in handler: %w", err)
						}
						if _, err := st.Head(ctx); err != nil {
							return fmt.Errorf("head in handler: %w", err)
						}
					}
					if len(got) >= 2 {
						cancel()
					}
					return nil
				})
			}()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Subscribe with a handler that appends: %v after %d events, want context.Canceled after 2", err, len(got))
				}
			case <-time.After(testTimeout / 2):
				t.Fatalf("a handler that appends and reads did not finish in %v: does the backend hold a lock while it calls the handler?", testTimeout/2)
			}
			requireSameEvents(t, "a reactor's subscription against ReadAll", readAll(t, ctx, st), got)
		}},
		{name: "FilterStreamPrefix", run: func(t *testing.T, st eventstore.Store) {
			s.filterTest(t, st, eventstore.Filter{StreamPrefixes: []string{"execution-", "worker-"}})
		}},
		{name: "FilterType", run: func(t *testing.T, st eventstore.Store) {
			s.filterTest(t, st, eventstore.Filter{Types: []string{"test.keep", "test.also"}})
		}},
		{name: "FilterStreamAndType", run: func(t *testing.T, st eventstore.Store) {
			s.filterTest(t, st, eventstore.Filter{StreamPrefixes: []string{"execution-"}, Types: []string{"test.keep"}})
		}},
		{name: "HandlerErrorCatchUp", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			writeMixed(t, ctx, st, 5)
			s.handlerErrorTest(t, ctx, st, nil)
		}},
		{name: "HandlerErrorLive", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			s.handlerErrorTest(t, ctx, st, func() { writeMixed(t, ctx, st, 2) })
		}},
		{name: "CancelWhileLive", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			mustAppend(t, ctx, st, "execution-c", eventstore.Any, NewEvent("test.c", nil))
			k := s.startSink(ctx, st, 0, eventstore.Filter{}, 1000)
			waitCount(t, ctx, k, 1)
			k.cancel()
			select {
			case <-k.done:
				if !errors.Is(k.err, context.Canceled) {
					t.Fatalf("Subscribe after cancel returned %v, want context.Canceled", k.err)
				}
			case <-time.After(promptly):
				t.Fatalf("Subscribe did not return within %v of its context being cancelled", promptly)
			}
		}},
		{name: "CancelledBeforeStart", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			writeMixed(t, ctx, st, 3)
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			done := make(chan error, 1)
			go func() {
				done <- st.Subscribe(cctx, 0, eventstore.Filter{}, func([]domain.Envelope) error { return nil })
			}()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Subscribe with a cancelled context returned %v, want context.Canceled", err)
				}
			case <-time.After(promptly):
				t.Fatalf("Subscribe with a cancelled context did not return within %v", promptly)
			}
		}},
		{name: "SlowSubscriber", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			mustAppend(t, ctx, st, "execution-first", eventstore.NoStream, NewEvent("test.first", nil))
			const writers, each = 4, 50
			release := make(chan struct{})
			k := s.startSink(ctx, st, 0, eventstore.Filter{}, 1+writers*each, func(k *sink) {
				k.release = release
				k.delay = time.Millisecond
			})
			k.waitEntered(t, ctx) // the handler is now stuck until release
			wrote := make(chan error, 1)
			go func() {
				_, err := writeConcurrently(ctx, st, writers, each, func(w int) string { return fmt.Sprintf("worker-%d", w) }, nil)
				wrote <- err
			}()
			select {
			case err := <-wrote:
				if err != nil {
					close(release)
					t.Fatal(err)
				}
			case <-time.After(testTimeout / 2):
				close(release)
				t.Fatalf("%d appends did not finish in %v while a subscriber's handler was stuck", writers*each, testTimeout/2)
			}
			close(release)
			requireSameEvents(t, "slow subscriber against ReadAll", readAll(t, ctx, st), k.wait(t, ctx))
		}},
	}
}

// waitCount waits until k has at least n events. It fails if the
// subscription ends first, or makes no progress for stall.
func waitCount(t *testing.T, ctx context.Context, k *sink, n int) {
	t.Helper()
	last, since := k.count(), time.Now()
	for {
		c := k.count()
		if c >= n {
			return
		}
		if c != last {
			last, since = c, time.Now()
		}
		if time.Since(since) > stall {
			t.Fatalf("subscription from %d got %d of %d events and no more for %v", k.from, c, n, stall)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("subscription from %d got %d of %d events before the test timed out", k.from, k.count(), n)
		case <-k.done:
			if k.count() < n {
				t.Fatalf("subscription from %d ended with %v after %d of %d events", k.from, k.err, k.count(), n)
			}
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// filterTest writes matching and other events, some before the subscription
// (catch-up, with a run of other events longer than any sensible batch) and
// some after (live), and checks the subscription gets exactly the matching
// ones, in order.
func (s suite) filterTest(t *testing.T, st eventstore.Store, f eventstore.Filter) {
	ctx := testContext(t)
	write := func(stream, typ string, n int) {
		mustAppend(t, ctx, st, stream, eventstore.Any, NewEvents(typ, n)...)
	}
	// Catch-up part.
	write("execution-1", "test.keep", 2)
	write("executionX", "test.keep", 1) // not the prefix "execution-"
	write("queue-x", "test.keep", 1)
	write("execution-2", "test.drop", 1)
	write("worker-1", "test.also", 1)
	write("queue-x", "test.drop", 1500)
	write("execution-2", "test.keep", 1)
	want := len(filterLog(readAll(t, ctx, st), f))
	// Live part, ending with an event that passes every filter of the suite,
	// so that an event wrongly passed before it shows.
	live := []struct {
		stream, typ string
		n           int
	}{
		{"queue-y", "test.keep", 1},
		{"execution-3", "test.also", 1},
		{"worker-2", "test.drop", 1},
		{"execution-3", "test.drop", 3},
		{"execution-3", "test.keep", 1},
	}
	liveMatches := 0
	for _, l := range live {
		if f.Match(&domain.Envelope{Stream: l.stream, Type: l.typ}) {
			liveMatches += l.n
		}
	}
	k := s.startSink(ctx, st, 0, f, want+liveMatches)
	waitCount(t, ctx, k, want)
	for _, l := range live {
		write(l.stream, l.typ, l.n)
	}
	got := k.wait(t, ctx)
	wantEvents := filterLog(readAll(t, ctx, st), f)
	requireSameEvents(t, fmt.Sprintf("Subscribe with filter %+v against ReadAll filtered", f), wantEvents, got)
}

// handlerErrorTest checks that the handler's error ends Subscribe with that
// error and that the handler is not called again. feed, if not nil, runs
// once the subscription is started, to feed it live events.
func (s suite) handlerErrorTest(t *testing.T, ctx context.Context, st eventstore.Store, feed func()) {
	t.Helper()
	errBoom := errors.New("handler failed on purpose")
	var mu sync.Mutex
	calls := 0
	done := make(chan error, 1)
	go func() {
		done <- st.Subscribe(ctx, 0, eventstore.Filter{}, func([]domain.Envelope) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			return errBoom
		})
	}()
	if feed != nil {
		feed()
	}
	select {
	case err := <-done:
		if !errors.Is(err, errBoom) {
			t.Fatalf("Subscribe whose handler failed returned %v, want the handler's error", err)
		}
	case <-time.After(promptly):
		t.Fatalf("Subscribe did not return within %v of its handler failing", promptly)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Fatalf("handler called %d times, want once (no call after it failed)", calls)
	}
}
