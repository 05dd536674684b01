package postgres

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/internal/pgtest"
)

// TestTwoStoresAgreeWithModel: two Stores on one schema (two processes)
// append in turn to a few streams, each remembering the heads its own
// commits left, which the append statement then leaves to UNIQUE (stream,
// version) instead of looking them up (headsToCheck). Expected versions are
// mostly right, often stale (the other Store moved the stream), sometimes
// ahead of the log (which only a look-up can refuse), Any or NoStream. Every outcome must be what a model of the log says, and
// the log must end as the model's.
func TestTwoStoresAgreeWithModel(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t)
	stores := []*Store{newStore(t, Options{Schema: schema}), newStore(t, Options{Schema: schema})}
	ctx := pgtest.Context(t)
	rng := rand.New(rand.NewPCG(6, 2026))
	streams := []string{"execution-a", "execution-b", "execution-c", "queue-q", "worker-w"}
	heads := map[string]int64{} // stream → last version; absent: no events
	last := func(st string) int64 {
		if v, ok := heads[st]; ok {
			return v
		}
		return -1
	}
	for step := range 600 {
		s := stores[rng.IntN(2)]
		st := streams[rng.IntN(len(streams))]
		h := last(st)
		var exp eventstore.ExpectedVersion
		switch r := rng.IntN(10); {
		case r < 5 && h >= 0:
			exp = eventstore.Exact(uint64(h))
		case r < 7 && h >= 1:
			exp = eventstore.Exact(uint64(h - 1 - int64(rng.IntN(int(h))))) // stale
		case r == 7:
			exp = eventstore.Exact(uint64(h + 1 + int64(rng.IntN(3)))) // ahead of the log: must not leave a gap
		case r == 8:
			exp = eventstore.Any
		default:
			exp = eventstore.NoStream
		}
		n := 1 + rng.IntN(2)
		res, err := s.Append(ctx, st, exp, storetest.NewEvents(fmt.Sprintf("test.%d", step), n)...)
		ok := exp.Satisfied(h >= 0, uint64(max(h, 0)))
		if ok {
			if err != nil || res.Version != uint64(h+int64(n)) {
				t.Fatalf("step %d: %s at %d with %v: %+v, %v; want version %d", step, st, h, exp, res, err, h+int64(n))
			}
			heads[st] = h + int64(n)
			continue
		}
		var wv *eventstore.WrongVersionError
		if !errors.As(err, &wv) || wv.Exists != (h >= 0) || (h >= 0 && wv.Actual != uint64(h)) {
			t.Fatalf("step %d: %s at %d with %v: %v; want a WrongVersionError at %d", step, st, h, exp, err, h)
		}
	}
	for _, st := range streams {
		evs, err := stores[0].ReadStream(ctx, st, 0, 10_000)
		if errors.Is(err, eventstore.ErrStreamNotFound) && last(st) == -1 {
			continue
		}
		if err != nil || int64(len(evs)) != last(st)+1 {
			t.Fatalf("%s holds %d events (%v), want %d", st, len(evs), err, last(st)+1)
		}
		for i, e := range evs {
			if e.Version != uint64(i) {
				t.Fatalf("%s: event %d at version %d", st, i, e.Version)
			}
		}
	}
}

// TestTwoStoresRaceWithoutGaps: two Stores on one schema race appends with
// Exact expected versions on shared streams, each from its own idea of the
// heads (what it last wrote or read). Whatever wins, every stream must hold
// dense versions, and every append that succeeded must be in the log where
// its result says.
func TestTwoStoresRaceWithoutGaps(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t)
	stores := []*Store{newStore(t, Options{Schema: schema}), newStore(t, Options{Schema: schema})}
	ctx := pgtest.Context(t)
	streams := []string{"execution-r1", "execution-r2", "execution-r3"}
	type won struct {
		stream  string
		version uint64
		id      string
	}
	var mu sync.Mutex
	var wins []won
	var wg sync.WaitGroup
	for w := range 8 {
		s := stores[w%2]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			seen := map[string]int64{}
			for range 60 {
				st := streams[rng.IntN(len(streams))]
				exp := eventstore.NoStream
				if v, ok := seen[st]; ok {
					exp = eventstore.Exact(uint64(v))
				}
				ev := storetest.NewEvent("test.race", nil)
				res, err := s.Append(ctx, st, exp, ev)
				var wv *eventstore.WrongVersionError
				switch {
				case err == nil:
					seen[st] = int64(res.Version)
					mu.Lock()
					wins = append(wins, won{st, res.Version, ev.ID.String()})
					mu.Unlock()
				case errors.As(err, &wv):
					if wv.Exists {
						seen[st] = int64(wv.Actual)
					}
				default:
					t.Errorf("append to %s with %v: %v", st, exp, err)
					return
				}
			}
		})
	}
	wg.Wait()
	byStream := map[string]map[uint64]string{}
	for _, st := range streams {
		evs, err := stores[1].ReadStream(ctx, st, 0, 10_000)
		if err != nil {
			t.Fatal(err)
		}
		byStream[st] = map[uint64]string{}
		for i, e := range evs {
			if e.Version != uint64(i) {
				t.Fatalf("%s: event %d at version %d: a gap", st, i, e.Version)
			}
			byStream[st][e.Version] = e.ID.String()
		}
	}
	for _, w := range wins {
		if got := byStream[w.stream][w.version]; got != w.id {
			t.Fatalf("an append acknowledged at %s version %d is not there (found %q)", w.stream, w.version, got)
		}
	}
	if len(wins) < len(streams) {
		t.Fatalf("only %d appends won", len(wins))
	}
}
