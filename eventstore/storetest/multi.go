package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// appendMultiTests (Capabilities.AtomicMultiStream): AppendMulti writes every
// stream's events, contiguously in the log and in the order given, and returns
// the version and position of the very last one; if any stream's expected
// version fails, it returns that stream's *WrongVersionError and writes
// nothing; its events stay contiguous while other writers append concurrently;
// a stream without events is a condition, checked and not written.
//
// Whatever the capability: the store reports it (eventstore.AtomicMultiStream
// agrees with Capabilities.AtomicMultiStream), and a store without it fails
// AppendMulti of two streams with eventstore.ErrMultiStream and writes nothing.
func (s suite) appendMultiTests() []subtest {
	return []subtest{
		{name: "ReportsCapability", run: func(t *testing.T, st eventstore.Store) {
			if got := eventstore.AtomicMultiStream(st); got != s.caps.AtomicMultiStream {
				t.Fatalf("eventstore.AtomicMultiStream = %v, Capabilities.AtomicMultiStream = %v", got, s.caps.AtomicMultiStream)
			}
			if s.caps.AtomicMultiStream {
				return
			}
			ctx := testContext(t)
			before := snapshot(t, ctx, st)
			_, err := st.AppendMulti(ctx,
				eventstore.StreamAppend{Stream: "queue-r", Expected: eventstore.Any, Events: NewEvents("test.r", 1)},
				eventstore.StreamAppend{Stream: "execution-r", Expected: eventstore.Any, Events: NewEvents("test.r", 1)})
			requireErrorIs(t, err, eventstore.ErrMultiStream, "AppendMulti of two streams without the capability")
			s.requireUnchanged(t, ctx, st, before, "a refused AppendMulti of two streams")
		}},
		{name: "ContiguousInOrder", run: func(t *testing.T, st eventstore.Store) {
			s.needAtomicMulti(t)
			ctx := testContext(t)
			pre := NewEvents("test.pre", 2)
			mustAppend(t, ctx, st, "queue-b", eventstore.NoStream, pre...)
			a, b, c := NewEvents("test.a", 3), NewEvents("test.b", 2), NewEvents("test.c", 1)
			head := mustHead(t, ctx, st)
			res, err := st.AppendMulti(ctx,
				eventstore.StreamAppend{Stream: "execution-a", Expected: eventstore.NoStream, Events: a},
				eventstore.StreamAppend{Stream: "queue-b", Expected: eventstore.Exact(1), Events: b},
				eventstore.StreamAppend{Stream: "worker-c", Expected: eventstore.Any, Events: c},
			)
			if err != nil {
				t.Fatalf("AppendMulti: %v", err)
			}
			written := append(append(append([]domain.Envelope{}, a...), b...), c...)
			got, err := st.ReadAll(ctx, head, 100)
			if err != nil {
				t.Fatalf("ReadAll(%d): %v", head, err)
			}
			requireWritten(t, "ReadAll after AppendMulti", written, got)
			s.requireLogShape(t, "ReadAll after AppendMulti", got)
			requireStreamShape(t, "execution-a", "execution-a", 0, got[0:3])
			requireStreamShape(t, "queue-b", "queue-b", 2, got[3:5])
			requireStreamShape(t, "worker-c", "worker-c", 0, got[5:6])
			if last := got[len(got)-1]; res.Version != last.Version || res.Position != last.Position {
				t.Fatalf("AppendMulti returned %+v, want version %d position %d (the last event of the last stream)", res, last.Version, last.Position)
			}
		}},
		{name: "AllOrNothing", run: func(t *testing.T, st eventstore.Store) {
			s.needAtomicMulti(t)
			ctx := testContext(t)
			mustAppend(t, ctx, st, "execution-exists", eventstore.NoStream, NewEvents("test.pre", 3)...)
			for _, failFirst := range []bool{false, true} {
				t.Run(fmt.Sprintf("failingStreamFirst=%v", failFirst), func(t *testing.T) {
					good := eventstore.StreamAppend{Stream: "queue-new", Expected: eventstore.NoStream, Events: NewEvents("test.good", 2)}
					bad := eventstore.StreamAppend{Stream: "execution-exists", Expected: eventstore.Exact(1), Events: NewEvents("test.bad", 1)}
					appends := []eventstore.StreamAppend{good, bad}
					if failFirst {
						appends = []eventstore.StreamAppend{bad, good}
					}
					before := snapshot(t, ctx, st)
					_, err := st.AppendMulti(ctx, appends...)
					requireWrongVersion(t, err, "execution-exists", eventstore.Exact(1), true, 2)
					s.requireUnchanged(t, ctx, st, before, "a failed AppendMulti")
					requireStreamMissing(t, ctx, st, "queue-new")
				})
			}
		}},
		{name: "Conditions", run: func(t *testing.T, st eventstore.Store) {
			s.needAtomicMulti(t)
			ctx := testContext(t)
			mustAppend(t, ctx, st, "worker-cond", eventstore.NoStream, NewEvents("test.reg", 2)...)
			// A condition that holds: the events are written, nothing goes to
			// the condition's stream, the result is the last written event's.
			head := mustHead(t, ctx, st)
			a := NewEvents("test.a", 2)
			res, err := st.AppendMulti(ctx,
				eventstore.StreamAppend{Stream: "execution-ca", Expected: eventstore.NoStream, Events: a},
				eventstore.StreamAppend{Stream: "worker-cond", Expected: eventstore.Exact(1)},
				eventstore.StreamAppend{Stream: "worker-none", Expected: eventstore.NoStream})
			if err != nil {
				t.Fatalf("AppendMulti with conditions that hold: %v", err)
			}
			got, err := st.ReadAll(ctx, head, 100)
			if err != nil {
				t.Fatal(err)
			}
			requireWritten(t, "ReadAll after AppendMulti with conditions", a, got)
			if last := got[len(got)-1]; res.Version != last.Version || res.Position != last.Position {
				t.Fatalf("AppendMulti returned %+v, want version %d position %d (its last event)", res, last.Version, last.Position)
			}
			if n := len(readStreamAll(t, ctx, st, "worker-cond")); n != 2 {
				t.Fatalf("the condition's stream has %d events, want the 2 it had", n)
			}
			requireStreamMissing(t, ctx, st, "worker-none")
			// A condition that fails, first or last: nothing is written.
			for _, condFirst := range []bool{true, false} {
				before := snapshot(t, ctx, st)
				cond := eventstore.StreamAppend{Stream: "worker-cond", Expected: eventstore.Exact(0)}
				write := eventstore.StreamAppend{Stream: "execution-cb", Expected: eventstore.NoStream, Events: NewEvents("test.b", 1)}
				appends := []eventstore.StreamAppend{write, cond}
				if condFirst {
					appends = []eventstore.StreamAppend{cond, write}
				}
				_, err := st.AppendMulti(ctx, appends...)
				requireWrongVersion(t, err, "worker-cond", eventstore.Exact(0), true, 1)
				s.requireUnchanged(t, ctx, st, before, "an AppendMulti whose condition failed")
				requireStreamMissing(t, ctx, st, "execution-cb")
			}
			// A replay is known by its ids, though its condition no longer holds.
			mustAppend(t, ctx, st, "worker-cond", eventstore.Exact(1), NewEvents("test.beat", 1)...)
			again, err := st.AppendMulti(ctx,
				eventstore.StreamAppend{Stream: "execution-ca", Expected: eventstore.NoStream, Events: a},
				eventstore.StreamAppend{Stream: "worker-cond", Expected: eventstore.Exact(1)},
				eventstore.StreamAppend{Stream: "worker-none", Expected: eventstore.NoStream})
			if err != nil || again != res {
				t.Fatalf("replayed AppendMulti with conditions: %+v, %v; want %+v", again, err, res)
			}
			// Only conditions, or a condition on Any: refused, nothing written.
			before := snapshot(t, ctx, st)
			_, err = st.AppendMulti(ctx, eventstore.StreamAppend{Stream: "worker-cond", Expected: eventstore.Exact(2)})
			requireErrorIs(t, err, eventstore.ErrInvalidEvent, "AppendMulti of conditions only")
			_, err = st.AppendMulti(ctx,
				eventstore.StreamAppend{Stream: "execution-cc", Expected: eventstore.NoStream, Events: NewEvents("test.c", 1)},
				eventstore.StreamAppend{Stream: "worker-cond", Expected: eventstore.Any})
			requireErrorIs(t, err, eventstore.ErrInvalidEvent, "a condition on Any")
			s.requireUnchanged(t, ctx, st, before, "refused conditions")
		}},
		{name: "ContiguousUnderConcurrency", slow: true, run: func(t *testing.T, st eventstore.Store) {
			s.needAtomicMulti(t)
			ctx := testContext(t)
			const writers, appendsEach, multis = 4, 25, 20
			var wg sync.WaitGroup
			var returned atomic.Int64
			errs := make(chan error, writers+1)
			for w := range writers {
				wg.Go(func() {
					for i := range appendsEach {
						_, err := st.Append(ctx, fmt.Sprintf("worker-%d", w), eventstore.Any, NewEvent("test.noise", i))
						returned.Add(1)
						if err != nil {
							errs <- err
							return
						}
					}
				})
			}
			batches := make([][]domain.Envelope, multis)
			wg.Go(func() {
				for i := range batches {
					a, b := NewEvents("test.ma", 2), NewEvents("test.mb", 1)
					_, err := st.AppendMulti(ctx,
						eventstore.StreamAppend{Stream: "execution-a", Expected: eventstore.Any, Events: a},
						eventstore.StreamAppend{Stream: "execution-b", Expected: eventstore.Any, Events: b},
					)
					returned.Add(1)
					if err != nil {
						errs <- err
						return
					}
					batches[i] = append(a, b...)
				}
			})
			if !waitGroup(&wg, testTimeout) {
				t.Fatalf("appends still running after %v: %d of %d returned", testTimeout, returned.Load(), writers*appendsEach+multis)
			}
			close(errs)
			for err := range errs {
				t.Fatalf("append: %v", err)
			}
			all := readAll(t, ctx, st)
			s.requireLogShape(t, "ReadAll", all)
			index := make(map[string]int, len(all))
			for i := range all {
				index[all[i].ID.String()] = i
			}
			for i, batch := range batches {
				at, ok := index[batch[0].ID.String()]
				if !ok || at+len(batch) > len(all) {
					t.Fatalf("AppendMulti batch %d is not in the log", i)
				}
				requireWritten(t, fmt.Sprintf("AppendMulti batch %d in the log", i), batch, all[at:at+len(batch)])
			}
		}},
	}
}
