package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/eventstore"
)

// concurrencyTests: optimistic concurrency holds under contention. Many
// goroutines appending to one stream with Exact, retrying on the wrong-version
// error (whose Actual tells them where the stream is), win each version exactly
// once: the stream ends with no duplicate and no hole, and every winner's event
// sits at the version its AppendResult named. Concurrent appends with Any keep
// each append's events together at consecutive versions.
func (s suite) concurrencyTests() []subtest {
	return []subtest{
		{name: "OneStreamExactRetry", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			const stream = "execution-contended"
			const goroutines, winsEach = 32, 4
			type win struct {
				version uint64
				id      uuid.UUID
			}
			wins := make([][]win, goroutines)
			errs := make([]error, goroutines)
			var won atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					expected := eventstore.NoStream
					var known uint64 // a version known to exist, once seen
					seen := false
					for len(wins[g]) < winsEach {
						e := NewEvent("test.contended", map[string]int{"g": g})
						for {
							res, err := st.Append(ctx, stream, expected, e)
							if err == nil {
								wins[g] = append(wins[g], win{res.Version, e.ID})
								won.Add(1)
								expected, known, seen = eventstore.Exact(res.Version), res.Version, true
								break
							}
							var wv *eventstore.WrongVersionError
							if !errors.As(err, &wv) || !errors.Is(err, eventstore.ErrWrongExpectedVersion) {
								errs[g] = fmt.Errorf("append with expected %s: %w", expected, err)
								return
							}
							if seen && (!wv.Exists || wv.Actual < known) {
								errs[g] = fmt.Errorf("WrongVersionError says the stream is at %d (exists %v), but version %d exists", wv.Actual, wv.Exists, known)
								return
							}
							if wv.Exists {
								expected, known, seen = eventstore.Exact(wv.Actual), wv.Actual, true
							} else {
								expected = eventstore.NoStream
							}
						}
					}
				})
			}
			if !waitGroup(&wg, testTimeout) {
				t.Fatalf("%d goroutines still appending after %v: %d of %d versions won", goroutines, testTimeout, won.Load(), goroutines*winsEach)
			}
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			const total = goroutines * winsEach
			byVersion := make(map[uint64]uuid.UUID, total)
			for _, ws := range wins {
				for _, w := range ws {
					if prev, dup := byVersion[w.version]; dup {
						t.Fatalf("version %d was won twice, by events %s and %s", w.version, prev, w.id)
					}
					byVersion[w.version] = w.id
				}
			}
			got := readStreamAll(t, ctx, st, stream)
			if len(got) != total {
				t.Fatalf("stream holds %d events after %d successful appends", len(got), total)
			}
			requireStreamShape(t, "contended stream", stream, 0, got)
			for _, e := range got {
				if id, ok := byVersion[e.Version]; !ok || id != e.ID {
					t.Fatalf("version %d holds event %s, but the append that won it wrote %s", e.Version, e.ID, id)
				}
			}
		}},
		{name: "OneStreamAny", slow: true, run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			const stream = "queue-busy"
			const goroutines, appendsEach = 16, 20
			type done struct {
				res eventstore.AppendResult
				ids [2]uuid.UUID
			}
			results := make([][]done, goroutines)
			errs := make([]error, goroutines)
			var returned atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for range appendsEach {
						evs := NewEvents("test.pair", 2)
						res, err := st.Append(ctx, stream, eventstore.Any, evs...)
						returned.Add(1)
						if err != nil {
							errs[g] = err
							return
						}
						results[g] = append(results[g], done{res, [2]uuid.UUID{evs[0].ID, evs[1].ID}})
					}
				})
			}
			if !waitGroup(&wg, testTimeout) {
				t.Fatalf("%d goroutines still appending after %v: %d of %d appends returned", goroutines, testTimeout, returned.Load(), goroutines*appendsEach)
			}
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			got := readStreamAll(t, ctx, st, stream)
			if len(got) != goroutines*appendsEach*2 {
				t.Fatalf("stream holds %d events, want %d", len(got), goroutines*appendsEach*2)
			}
			requireStreamShape(t, "busy stream", stream, 0, got)
			for _, rs := range results {
				for _, r := range rs {
					v := r.res.Version
					if v < 1 || got[v-1].ID != r.ids[0] || got[v].ID != r.ids[1] || got[v].Position != r.res.Position {
						t.Fatalf("an append returned %+v, but its two events are not at versions %d and %d with that position", r.res, v-1, v)
					}
				}
			}
		}},
	}
}
