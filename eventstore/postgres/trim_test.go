package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/internal/pgtest"
)

// smallSchema returns a fresh migrated schema whose partitions hold size
// positions each.
func smallSchema(t *testing.T, size int64) string {
	t.Helper()
	schema := freshSchema(t)
	if err := SetPartitionSize(pgtest.Context(t), sharedPool.Get(t), schema, size); err != nil {
		t.Fatal(err)
	}
	return schema
}

// partitionsOf returns the partitions' lower bounds and the bytes the events
// table takes on disk (every partition, its indexes and TOAST).
func partitionsOf(t *testing.T, ctx context.Context, schema string) (los []int64, bytes int64) {
	t.Helper()
	pool := sharedPool.Get(t)
	rows, err := pool.Query(ctx, "SELECT lo FROM "+schema+".log_partitions ORDER BY lo")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var lo int64
		if err := rows.Scan(&lo); err != nil {
			t.Fatal(err)
		}
		los = append(los, lo)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var attached int
	err = pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(pg_total_relation_size(inhrelid)), 0)::bigint FROM pg_inherits
		WHERE inhparent = $1::regclass`, schema+".events").Scan(&attached, &bytes)
	if err != nil {
		t.Fatal(err)
	}
	if attached != len(los) {
		t.Fatalf("log_partitions lists %d partitions, %d are attached", len(los), attached)
	}
	return los, bytes
}

// TestTrimDropsPartitions: two Stores on one schema of partitions of 100
// positions. A trim to 750 drops the seven partitions wholly below it (their
// tables are gone and the table's size falls), deletes the rows below 750 in
// the partition that holds it, and keeps what the contract says: reads below
// the start fail, kept streams continue at their version (also from the
// other Store, whose cached heads lie below the start), the others are
// forgotten, the ids of trimmed events are forgotten, and the chain goes on
// from Start's hash.
func TestTrimDropsPartitions(t *testing.T) {
	t.Parallel()
	schema := smallSchema(t, 100)
	a, b := newStore(t, Options{Schema: schema}), newStore(t, Options{Schema: schema})
	ctx := pgtest.Context(t)
	var trimmedID domain.Envelope
	for i := range 50 {
		s := []*Store{a, b}[i%2]
		evs := storetest.NewEvents("test.bulk", 19)
		if i == 3 {
			trimmedID = evs[0]
		}
		if _, err := s.Append(ctx, fmt.Sprintf("execution-%d", i), eventstore.NoStream, evs...); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, "queue-q", eventstore.Any, storetest.NewEvent("test.queue", i)); err != nil {
			t.Fatal(err)
		}
	}
	head, _ := a.Head(ctx)
	if head != 1000 {
		t.Fatalf("head %d, want 1000", head)
	}
	losBefore, bytesBefore := partitionsOf(t, ctx, schema)
	if len(losBefore) < 10 || losBefore[0] != 0 {
		t.Fatalf("partitions before the trim: %v", losBefore)
	}
	all, err := a.ReadAll(ctx, 0, 2000)
	if err != nil || len(all) != 1000 {
		t.Fatalf("ReadAll: %d, %v", len(all), err)
	}
	// execution-37 straddles 750 (positions 740–758), execution-36 lies below.
	keep := []string{"queue-q", "execution-10", "execution-37"}
	if err := b.Trim(ctx, 750, keep); err != nil {
		t.Fatal(err)
	}

	losAfter, bytesAfter := partitionsOf(t, ctx, schema)
	if losAfter[0] != 700 || len(losAfter) != len(losBefore)-7 {
		t.Fatalf("partitions after Trim(750): %v (before %v), want the seven below 700 dropped", losAfter, losBefore)
	}
	for lo := 0; lo < 700; lo += 100 {
		var reg *string
		if err := sharedPool.Get(t).QueryRow(ctx, "SELECT to_regclass($1)::text", fmt.Sprintf("%s.events_%d", schema, lo)).Scan(&reg); err != nil || reg != nil {
			t.Fatalf("partition events_%d still exists (%v, %v)", lo, reg, err)
		}
	}
	var below int
	if err := sharedPool.Get(t).QueryRow(ctx, "SELECT count(*) FROM "+schema+".events WHERE position < 750").Scan(&below); err != nil || below != 0 {
		t.Fatalf("%d rows below the start remain (%v)", below, err)
	}
	t.Logf("events table: %d bytes in %d partitions before the trim, %d in %d after", bytesBefore, len(losBefore), bytesAfter, len(losAfter))
	if bytesAfter*2 > bytesBefore {
		t.Fatalf("the events table takes %d bytes after the trim, %d before: not reclaimed", bytesAfter, bytesBefore)
	}

	first, prev, err := a.Start(ctx)
	if err != nil || first != 750 || prev != all[749].Hash {
		t.Fatalf("Start = %d, %s, %v; want 750, %s", first, prev, err, all[749].Hash)
	}
	for _, s := range []*Store{a, b} {
		_, err := s.ReadAll(ctx, 749, 10)
		var te *eventstore.TrimmedError
		if !errors.As(err, &te) || te.First != 750 {
			t.Fatalf("ReadAll(749) after the trim: %v", err)
		}
		live, err := s.ReadAll(ctx, 750, 1000)
		if err != nil || len(live) != 250 {
			t.Fatalf("ReadAll(750): %d, %v", len(live), err)
		}
	}

	// Kept streams continue, from either Store: a's cached heads lie below the start.
	for i, st := range []string{"execution-10", "execution-37"} {
		s := []*Store{a, b}[i]
		if _, err := s.Append(ctx, st, eventstore.NoStream, storetest.NewEvent("test.again", nil)); !errors.Is(err, eventstore.ErrWrongExpectedVersion) {
			t.Fatalf("NoStream on the kept stream %s: %v", st, err)
		}
		res, err := s.Append(ctx, st, eventstore.Any, storetest.NewEvent("test.more", nil))
		if err != nil || res.Version != 19 {
			t.Fatalf("Any on the kept stream %s: %+v, %v; want version 19", st, res, err)
		}
	}
	if res, err := a.Append(ctx, "queue-q", eventstore.Any, storetest.NewEvent("test.queue", nil)); err != nil || res.Version != 50 {
		t.Fatalf("Any on queue-q: %+v, %v; want version 50", res, err)
	}
	evs, err := b.ReadStream(ctx, "execution-37", 0, 100)
	if err != nil || len(evs) != 10 || evs[0].Version != 10 || evs[0].Position != 750 {
		t.Fatalf("ReadStream of execution-37 from 0: %d events from %+v, %v; want its 10 live ones from version 10 at 750", len(evs), evs[0], err)
	}
	// The others are forgotten: created again from version 0, and the ids
	// of trimmed events are new again.
	if _, err := a.ReadStream(ctx, "execution-36", 0, 10); !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Fatalf("ReadStream of the forgotten execution-36: %v", err)
	}
	res, err := b.Append(ctx, "execution-3", eventstore.NoStream, trimmedID)
	if err != nil || res.Version != 0 {
		t.Fatalf("the forgotten execution-3 with a trimmed event's id: %+v, %v; want version 0", res, err)
	}
	live, err := a.ReadAll(ctx, 750, 1000)
	if err != nil {
		t.Fatal(err)
	}
	requireChained(t, "the live log after the trim", prev, 750, live)

	// A second trim past the partition that held the first start.
	if err := a.Trim(ctx, 950, []string{"queue-q"}); err != nil {
		t.Fatal(err)
	}
	if los, _ := partitionsOf(t, ctx, schema); los[0] != 900 {
		t.Fatalf("partitions after Trim(950): %v", los)
	}
	if _, err := a.ReadStream(ctx, "execution-40", 0, 10); !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Fatalf("execution-40 (800–818, not kept) after the second trim: %v", err)
	}
	if res, err := b.Append(ctx, "queue-q", eventstore.Any, storetest.NewEvent("test.queue", nil)); err != nil || res.Version != 51 {
		t.Fatalf("Any on queue-q after the second trim: %+v, %v; want version 51", res, err)
	}
}

// TestTrimFinishedAfterCrash: a process killed between a trim's transaction
// and its drops (step 1 done, step 2 not) leaves the start moved and the
// partitions in place; the next Open of a Store on the schema drops them,
// and so would the next Trim.
func TestTrimFinishedAfterCrash(t *testing.T) {
	t.Parallel()
	schema := smallSchema(t, 10)
	s := newStore(t, Options{Schema: schema})
	ctx := pgtest.Context(t)
	for i := range 6 {
		if _, err := s.Append(ctx, fmt.Sprintf("execution-%d", i), eventstore.NoStream, storetest.NewEvents("test.crash", 10)...); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.recordTrim(ctx, 35, []string{"execution-3"}); err != nil { // killed here
		t.Fatal(err)
	}
	if _, err := s.ReadAll(ctx, 0, 10); !errors.Is(err, eventstore.ErrTrimmed) {
		t.Fatalf("ReadAll(0) after step 1: %v", err)
	}
	if _, err := s.ReadStream(ctx, "execution-1", 0, 10); !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Fatalf("ReadStream of a trimmed stream after step 1: %v", err)
	}
	if los, _ := partitionsOf(t, ctx, schema); los[0] != 0 {
		t.Fatalf("partitions after step 1 alone: %v; want them all still there", los)
	}
	again := newStore(t, Options{Schema: schema}) // Open finishes it
	if los, _ := partitionsOf(t, ctx, schema); los[0] != 30 {
		t.Fatalf("partitions after Open: %v; want those below 30 dropped", los)
	}
	if res, err := again.Append(ctx, "execution-3", eventstore.Exact(9), storetest.NewEvent("test.crash", nil)); err != nil || res.Version != 10 {
		t.Fatalf("the kept stream after the finished trim: %+v, %v", res, err)
	}
	if res, err := again.Append(ctx, "execution-1", eventstore.NoStream, storetest.NewEvent("test.crash", nil)); err != nil || res.Version != 0 {
		t.Fatalf("the forgotten stream after the finished trim: %+v, %v", res, err)
	}

	// The next Trim finishes a trim left undone, too.
	if err := s.recordTrim(ctx, 55, nil); err != nil {
		t.Fatal(err)
	}
	if err := again.Trim(ctx, 55, nil); err != nil { // at the start already: only step 2
		t.Fatal(err)
	}
	if los, _ := partitionsOf(t, ctx, schema); los[0] != 50 {
		t.Fatalf("partitions after the next Trim: %v; want those below 50 dropped", los)
	}
}
