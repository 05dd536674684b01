package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/postgres/pgmigrate"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/internal/pgtest"
	"github.com/turnstile/turnstile/internal/waitfor"
)

// requireChained fails unless evs, from position first on, are consecutive
// and each carries eventstore.NextHash of the one before (prev before the
// first).
func requireChained(t *testing.T, what string, prev domain.Hash, first uint64, evs []domain.Envelope) domain.Hash {
	t.Helper()
	for i := range evs {
		e := &evs[i]
		if e.Position != first+uint64(i) {
			t.Fatalf("%s: event %d at position %d, want %d", what, i, e.Position, first+uint64(i))
		}
		if want := eventstore.NextHash(prev, e); e.Hash != want {
			t.Fatalf("%s: position %d has hash %s, the chain says %s", what, e.Position, e.Hash, want)
		}
		prev = e.Hash
	}
	return prev
}

// oddEvents are events whose encoding has every corner the chain covers:
// nil and empty payloads, metadata, multi-byte UTF-8, empty strings.
func oddEvents(tag string) []domain.Envelope {
	a := storetest.NewEvent("test.chain."+tag, map[string]any{"x": "é✓"})
	a.CorrelationID, a.CausationID, a.Writer = "corr-é", "cause-✓", "writer-1"
	a.Metadata = json.RawMessage(`{"m":1}`)
	b := storetest.NewEvent("test.chain."+tag, nil)
	b.Data, b.SchemaVersion = nil, 3
	c := storetest.NewEvent("test.chain."+tag, nil)
	c.Data, c.Metadata = json.RawMessage{}, json.RawMessage{}
	return []domain.Envelope{a, b, c}
}

// TestChainTwoStoresEveryReadPath: two Stores on one schema (two processes)
// append concurrently, one round trip and the careful way (stale heads,
// streams they have not seen, several streams at once); every read path of
// either Store (ReadAll, ReadStream, a catch-up and a live Subscribe, which
// takes the Store's own commits from memory) returns the events with the
// hashes eventstore.NextHash gives, and log_head.hash is the last one.
func TestChainTwoStoresEveryReadPath(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t)
	stores := []*Store{newStore(t, Options{Schema: schema}), newStore(t, Options{Schema: schema})}
	ctx := pgtest.Context(t)
	if !eventstore.KeepsChain(stores[0]) {
		t.Fatal("KeepsChain is false")
	}

	const writers, each = 8, 40
	liveCtx, stopLive := context.WithCancel(ctx)
	defer stopLive()
	var liveMu sync.Mutex
	var live []domain.Envelope
	liveDone := make(chan error, 1)
	go func() {
		liveDone <- stores[0].Subscribe(liveCtx, 0, eventstore.Filter{}, func(evs []domain.Envelope) error {
			liveMu.Lock()
			defer liveMu.Unlock()
			live = append(live, evs...)
			return nil
		})
	}()

	var wg sync.WaitGroup
	for w := range writers {
		s := stores[w%2]
		wg.Go(func() {
			for i := range each {
				var err error
				switch i % 4 {
				case 0: // a stream of its own, one round trip once known
					_, err = s.Append(ctx, fmt.Sprintf("execution-w%d", w), eventstore.Any, storetest.NewEvent("test.chain", i))
				case 1: // a stream both stores write: stale heads, the careful way
					_, err = s.Append(ctx, "queue-shared", eventstore.Any, oddEvents("shared")...)
				case 2: // several streams at once
					_, err = s.AppendMulti(ctx,
						eventstore.StreamAppend{Stream: fmt.Sprintf("execution-m%d-%d", w, i), Expected: eventstore.NoStream, Events: oddEvents("multi")},
						eventstore.StreamAppend{Stream: fmt.Sprintf("worker-w%d", w), Expected: eventstore.Any, Events: []domain.Envelope{storetest.NewEvent("test.chain", nil)}})
				default: // a stream this store has never seen
					_, err = s.Append(ctx, fmt.Sprintf("action-%s", uuid.NewString()), eventstore.Any, storetest.NewEvent("test.chain", nil))
				}
				if err != nil {
					t.Errorf("writer %d, append %d: %v", w, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	head, err := stores[1].Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range stores {
		all, err := s.ReadAll(ctx, 0, int(head)+10)
		if err != nil || uint64(len(all)) != head {
			t.Fatalf("store %d: ReadAll: %d events, %v; want %d", i, len(all), err, head)
		}
		last := requireChained(t, fmt.Sprintf("store %d ReadAll", i), domain.Hash{}, 0, all)
		var headHash []byte
		if err := sharedPool.Get(t).QueryRow(ctx, "SELECT hash FROM "+schema+".log_head").Scan(&headHash); err != nil {
			t.Fatal(err)
		}
		if domain.Hash(headHash) != last {
			t.Fatalf("log_head.hash %x, the last event's %s", headHash, last)
		}
		// A read from the middle carries the same hashes.
		mid, err := s.ReadAll(ctx, head/2, int(head))
		if err != nil {
			t.Fatal(err)
		}
		requireChained(t, "ReadAll from the middle", all[head/2-1].Hash, head/2, mid)
		byPos := func(e domain.Envelope) domain.Hash { return all[e.Position].Hash }
		for _, st := range []string{"queue-shared", "execution-w3", "worker-w2"} {
			evs, err := s.ReadStream(ctx, st, 0, 10_000)
			if err != nil || len(evs) == 0 {
				t.Fatalf("ReadStream(%s): %d events, %v", st, len(evs), err)
			}
			for _, e := range evs {
				if e.Hash != byPos(e) {
					t.Fatalf("ReadStream(%s): position %d has hash %s, ReadAll %s", st, e.Position, e.Hash, byPos(e))
				}
			}
		}
		// A catch-up from the database.
		var caught []domain.Envelope
		subCtx, cancel := context.WithCancel(ctx)
		err = s.Subscribe(subCtx, 0, eventstore.Filter{}, func(evs []domain.Envelope) error {
			caught = append(caught, evs...)
			if uint64(len(caught)) >= head {
				cancel()
			}
			return nil
		})
		cancel()
		if uint64(len(caught)) != head {
			t.Fatalf("store %d: Subscribe delivered %d events (%v), want %d", i, len(caught), err, head)
		}
		requireChained(t, fmt.Sprintf("store %d Subscribe", i), domain.Hash{}, 0, caught)
	}

	var n uint64
	waitfor.That(t, fmt.Sprintf("the live subscription to have all %d events", head), func() bool {
		liveMu.Lock()
		defer liveMu.Unlock()
		n = uint64(len(live))
		return n >= head
	}, waitfor.Note(func() string { return fmt.Sprintf("it has %d", n) }))
	stopLive()
	<-liveDone
	liveMu.Lock()
	defer liveMu.Unlock()
	requireChained(t, "live Subscribe", domain.Hash{}, 0, live[:head])
}

// TestMigrateChainsAnOldLog: a log written by a build before the chain and
// the partitions (schema version 1, rows with and without payloads and
// metadata) gets every event's hash, in position order, from the migration,
// becomes the first partition as it is, and appends after it continue the
// chain and the streams.
func TestMigrateChainsAnOldLog(t *testing.T) {
	t.Parallel()
	pool := sharedPool.Get(t)
	ctx := pgtest.Context(t)
	schema := pgtest.Name("test_old_", 6)
	t.Cleanup(func() { dropSchema(t, schema) })
	applyOld(t, ctx, schema, 1)

	var old []domain.Envelope
	at := time.Date(2026, 11, 1, 12, 0, 0, 123456000, time.UTC)
	for i := range 25 {
		evs := oddEvents("old")
		e := evs[i%len(evs)]
		e.Stream, e.Version, e.Position = fmt.Sprintf("execution-%d", i%4), uint64(i/4), uint64(i)
		e.Time = at.Add(time.Duration(i) * time.Microsecond * 1001)
		old = append(old, e)
		_, err := pool.Exec(ctx, `INSERT INTO `+schema+`.events (position, stream, version, id, type, schema_version, committed_at,
			owner, correlation_id, causation_id, writer, data, metadata) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
			int64(e.Position), e.Stream, int64(e.Version), e.ID, e.Type, e.SchemaVersion, e.Time,
			string(e.Owner), e.CorrelationID, e.CausationID, e.Writer, []byte(e.Data), []byte(e.Metadata))
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "UPDATE "+schema+".log_head SET next = $1", len(old)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, pool, Options{Schema: schema}); err == nil {
		t.Fatal("Open of a schema at version 1 worked")
	}
	if _, err := Migrate(ctx, pool, schema); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	s := newStore(t, Options{Schema: schema})
	all, err := s.ReadAll(ctx, 0, 1000)
	if err != nil || len(all) != len(old) {
		t.Fatalf("ReadAll after the migration: %d events, %v", len(all), err)
	}
	prev := domain.Hash{}
	for i := range old {
		old[i].Hash = eventstore.NextHash(prev, &old[i])
		prev = old[i].Hash
		if all[i].Hash != old[i].Hash {
			t.Fatalf("position %d: migrated hash %s, want %s (the event as written: %+v)", i, all[i].Hash, old[i].Hash, old[i])
		}
	}
	// The old table is the first partition, whole, and its streams are known.
	var lo, hi int64
	var name string
	if err := pool.QueryRow(ctx, "SELECT lo, hi, name FROM "+schema+".log_partitions ORDER BY lo LIMIT 1").Scan(&lo, &hi, &name); err != nil ||
		lo != 0 || hi != DefaultPartitionSize || name != "events_0" {
		t.Fatalf("the first partition after the migration: [%d, %d) %s, %v", lo, hi, name, err)
	}
	if _, err := s.Append(ctx, "execution-1", eventstore.NoStream, oddEvents("new")...); !errors.Is(err, eventstore.ErrWrongExpectedVersion) {
		t.Fatalf("NoStream on a stream of the old log: %v", err)
	}
	if _, err := s.Append(ctx, "execution-0", eventstore.Any, oddEvents("new")...); err != nil {
		t.Fatal(err)
	}
	all, err = s.ReadAll(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	requireChained(t, "after the migration", domain.Hash{}, 0, all)
}

// applyOld brings schema to version v of the migrations, as an older build
// would have.
func applyOld(t *testing.T, ctx context.Context, schema string, v int) {
	t.Helper()
	set := migrations
	set.Migrations = set.Migrations[:v]
	if _, err := set.ApplyPool(ctx, sharedPool.Get(t), schema); err != nil {
		t.Fatalf("migrating %s to version %d: %v", schema, v, err)
	}
	var _ pgmigrate.Set = set
}
