package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// writeMixed appends n events to three streams, in appends of one to three
// events, one after another, and returns them in commit order.
func writeMixed(t *testing.T, ctx context.Context, st eventstore.Store, n int) []domain.Envelope {
	t.Helper()
	streams := []string{"execution-1", "queue-demo.sleep", "execution-10"}
	var written []domain.Envelope
	for i := 0; len(written) < n; i++ {
		evs := NewEvents(fmt.Sprintf("test.t%d", i%2), min(1+i%3, n-len(written)))
		mustAppend(t, ctx, st, streams[i%len(streams)], eventstore.Any, evs...)
		written = append(written, evs...)
	}
	return written
}

// readTests: ReadAll returns the events of every stream in position order,
// from a position inclusive, at most limit of them, and nothing past the end;
// ReadStream returns only its stream's events (names are exact, not prefixes),
// from a version inclusive, at most limit, nothing past the end, and
// ErrStreamNotFound for a stream never written.
func (s suite) readTests() []subtest {
	return []subtest{
		{name: "ReadAllEmptyLog", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			evs, err := st.ReadAll(ctx, 0, 10)
			if err != nil || len(evs) != 0 {
				t.Fatalf("ReadAll of an empty log: %d events, %v; want none, nil", len(evs), err)
			}
		}},
		{name: "ReadAllGlobalOrder", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			written := writeMixed(t, ctx, st, 30)
			got, err := st.ReadAll(ctx, 0, 1000)
			if err != nil {
				t.Fatalf("ReadAll: %v", err)
			}
			requireWritten(t, "ReadAll", written, got)
			s.requireLogShape(t, "ReadAll", got)
		}},
		{name: "ReadAllFromMiddle", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			writeMixed(t, ctx, st, 20)
			all := readAll(t, ctx, st)
			for _, k := range []int{1, 7, 19} {
				got, err := st.ReadAll(ctx, all[k].Position, 1000)
				if err != nil {
					t.Fatalf("ReadAll(%d): %v", all[k].Position, err)
				}
				requireSameEvents(t, fmt.Sprintf("ReadAll from the position of event %d (inclusive)", k), all[k:], got)
			}
			if !s.caps.DensePositions {
				// From a position between two events: starts at the next one.
				for k := 1; k < len(all); k++ {
					if all[k].Position > all[k-1].Position+1 {
						got, err := st.ReadAll(ctx, all[k-1].Position+1, 1000)
						if err != nil {
							t.Fatalf("ReadAll(%d): %v", all[k-1].Position+1, err)
						}
						requireSameEvents(t, "ReadAll from a position in a hole", all[k:], got)
						break
					}
				}
			}
		}},
		{name: "ReadAllLimit", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			writeMixed(t, ctx, st, 10)
			all := readAll(t, ctx, st)
			got, err := st.ReadAll(ctx, 0, 3)
			if err != nil {
				t.Fatalf("ReadAll(0, 3): %v", err)
			}
			requireSameEvents(t, "ReadAll(0, 3)", all[:3], got)
			got, err = st.ReadAll(ctx, all[8].Position, 5)
			if err != nil {
				t.Fatalf("ReadAll(.., 5): %v", err)
			}
			requireSameEvents(t, "ReadAll with a limit past the end", all[8:], got)
			// Paging with limit 4 rebuilds the log.
			var paged []domain.Envelope
			var from uint64
			for range len(all) {
				page, err := st.ReadAll(ctx, from, 4)
				if err != nil {
					t.Fatalf("ReadAll(%d, 4): %v", from, err)
				}
				if len(page) > 4 {
					t.Fatalf("ReadAll(%d, 4) returned %d events", from, len(page))
				}
				if len(page) == 0 {
					break
				}
				paged = append(paged, page...)
				from = page[len(page)-1].Position + 1
			}
			requireSameEvents(t, "paging ReadAll by 4", all, paged)
		}},
		{name: "ReadAllPastEnd", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			writeMixed(t, ctx, st, 5)
			all := readAll(t, ctx, st)
			for _, from := range []uint64{all[len(all)-1].Position + 1, mustHead(t, ctx, st), 1 << 50} {
				evs, err := st.ReadAll(ctx, from, 10)
				if err != nil || len(evs) != 0 {
					t.Fatalf("ReadAll(%d) past the last event: %d events, %v; want none, nil", from, len(evs), err)
				}
			}
		}},
		{name: "ReadStreamFromVersionWithLimit", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			const stream = "execution-r"
			written := NewEvents("test.r", 10)
			for i := range written {
				mustAppend(t, ctx, st, "queue-noise", eventstore.Any, NewEvent("test.noise", i))
				mustAppend(t, ctx, st, stream, eventstore.Any, written[i])
			}
			for _, c := range []struct {
				from       uint64
				limit      int
				start, end int // want written[start:end]
			}{
				{0, 100, 0, 10},
				{3, 4, 3, 7},
				{0, 1, 0, 1},
				{8, 10, 8, 10},
				{9, 1, 9, 10},
				{10, 5, 10, 10},
				{1 << 40, 5, 10, 10},
			} {
				got, err := st.ReadStream(ctx, stream, c.from, c.limit)
				if err != nil {
					t.Fatalf("ReadStream(%q, %d, %d): %v", stream, c.from, c.limit, err)
				}
				what := fmt.Sprintf("ReadStream(from %d, limit %d)", c.from, c.limit)
				requireWritten(t, what, written[c.start:c.end], got)
				requireStreamShape(t, what, stream, uint64(c.start), got)
			}
		}},
		{name: "ReadStreamExactName", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			a, ab, b := NewEvents("test.a", 2), NewEvents("test.ab", 2), NewEvents("test.b", 2)
			mustAppend(t, ctx, st, "queue-ab", eventstore.Any, ab[0])
			mustAppend(t, ctx, st, "queue-a", eventstore.Any, a[0])
			mustAppend(t, ctx, st, "queue-b", eventstore.Any, b...)
			mustAppend(t, ctx, st, "queue-a", eventstore.Any, a[1])
			mustAppend(t, ctx, st, "queue-ab", eventstore.Any, ab[1])
			requireWritten(t, "ReadStream(queue-a)", a, readStreamAll(t, ctx, st, "queue-a"))
			requireWritten(t, "ReadStream(queue-ab)", ab, readStreamAll(t, ctx, st, "queue-ab"))
			requireWritten(t, "ReadStream(queue-b)", b, readStreamAll(t, ctx, st, "queue-b"))
			requireStreamMissing(t, ctx, st, "queue-")
			requireStreamMissing(t, ctx, st, "QUEUE-A")
		}},
		{name: "ReadStreamUnknown", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			requireStreamMissing(t, ctx, st, "execution-none")
			mustAppend(t, ctx, st, "execution-some", eventstore.Any, NewEvent("test.x", nil))
			requireStreamMissing(t, ctx, st, "execution-none")
		}},
	}
}

// headTests: Head is 0 on an empty log; after every append it is above the
// appended events (with dense positions, equal to the event count); and every
// event below Head is readable at the moment Head returns, even while other
// writers commit: no event with a position below a Head already returned may
// appear later (the PostgreSQL "sequence committed out of order" hazard), and
// Head never goes back.
func (s suite) headTests() []subtest {
	return []subtest{
		{name: "EmptyLog", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			if h := mustHead(t, ctx, st); h != 0 {
				t.Fatalf("Head of an empty log = %d, want 0", h)
			}
		}},
		{name: "AfterAppends", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			count := 0
			for i := range 8 {
				n := 1 + i%3
				res := mustAppend(t, ctx, st, fmt.Sprintf("execution-%d", i%2), eventstore.Any, NewEvents("test.h", n)...)
				count += n
				h := mustHead(t, ctx, st)
				if h <= res.Position {
					t.Fatalf("Head = %d after an append landed at position %d; want above it", h, res.Position)
				}
				if s.caps.DensePositions && h != uint64(count) {
					t.Fatalf("Head = %d after %d events, want %d (dense positions)", h, count, count)
				}
				all := readAll(t, ctx, st)
				if len(all) != count {
					t.Fatalf("ReadAll returned %d events, want %d", len(all), count)
				}
				if last := all[len(all)-1].Position; last >= h {
					t.Fatalf("last event has position %d, not below Head %d", last, h)
				}
			}
		}},
		{name: "BelowHeadReadableUnderConcurrency", slow: true, run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			const writers, each = 8, 60
			type seen struct {
				head uint64
				ids  []string
			}
			var observations []seen
			stop := make(chan struct{})
			var readerErr error
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					h, err := st.Head(ctx)
					if err != nil {
						readerErr = err
						return
					}
					evs, err := st.ReadAll(ctx, 0, writers*each+1)
					if err != nil {
						readerErr = err
						return
					}
					if n := len(observations); n > 0 && observations[n-1].head == h {
						continue // nothing new to compare
					}
					var ids []string
					for _, e := range evs {
						if e.Position < h {
							ids = append(ids, e.ID.String())
						}
					}
					observations = append(observations, seen{h, ids})
				}
			})
			written, err := writeConcurrently(ctx, st, writers, each, func(w int) string { return fmt.Sprintf("execution-%d", w) }, nil)
			close(stop)
			if !waitGroup(&wg, testTimeout) {
				t.Fatalf("the reader was still in Head or ReadAll %v after it was told to stop (writers: %v)", testTimeout, err)
			}
			if err := errors.Join(err, readerErr); err != nil {
				t.Fatalf("concurrent appends and reads: %v", err)
			}
			final := readAll(t, ctx, st)
			requireResults(t, final, written)
			if len(final) != writers*each {
				t.Fatalf("log holds %d events, want %d", len(final), writers*each)
			}
			for i, o := range observations {
				if i > 0 && o.head < observations[i-1].head {
					t.Fatalf("Head went back from %d to %d", observations[i-1].head, o.head)
				}
				var want []string
				for _, e := range final {
					if e.Position < o.head {
						want = append(want, e.ID.String())
					}
				}
				if len(want) != len(o.ids) {
					t.Fatalf("Head returned %d while only %d events below it were readable; %d are there now", o.head, len(o.ids), len(want))
				}
				for i := range want {
					if want[i] != o.ids[i] {
						t.Fatalf("below Head %d, event %d was %s then, is %s now", o.head, i, o.ids[i], want[i])
					}
				}
			}
			if len(observations) == 0 {
				t.Fatal("the reader made no observation")
			}
		}},
	}
}
