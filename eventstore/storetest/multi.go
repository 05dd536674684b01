package storetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// appendMultiTests (Capabilities.AtomicMultiStream): AppendMulti writes every
// stream's events, contiguously in the log and in the order given, and returns
// the version and position of the very last one; if any stream's expected
// version fails, it returns that stream's *WrongVersionError and writes
// nothing; its events stay contiguous while other writers append concurrently.
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
		{name: "ContiguousUnderConcurrency", slow: true, run: func(t *testing.T, st eventstore.Store) {
			s.needAtomicMulti(t)
			ctx := testContext(t)
			const writers, appendsEach, multis = 4, 25, 20
			var wg sync.WaitGroup
			errs := make(chan error, writers+1)
			for w := range writers {
				wg.Go(func() {
					for i := range appendsEach {
						if _, err := st.Append(ctx, fmt.Sprintf("worker-%d", w), eventstore.Any, NewEvent("test.noise", i)); err != nil {
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
					if err != nil {
						errs <- err
						return
					}
					batches[i] = append(a, b...)
				}
			})
			wg.Wait()
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
