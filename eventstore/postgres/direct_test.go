package postgres

import (
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/internal/pgtest"
)

// TestDirectInsertAcrossStores: a Store inserts its groups straight into
// the partition that holds the head it last saw. When another Store on the
// schema has moved the head into the next partition meanwhile, the
// statement writes nothing and the group is decided again the careful way,
// landing at the real head in the right partition; the Store's next groups
// go straight into the new partition. The chain holds across both Stores.
func TestDirectInsertAcrossStores(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t)
	schema := smallSchema(t, 100)
	a, b := newStore(t, Options{Schema: schema, MaxBatch: 10}), newStore(t, Options{Schema: schema, MaxBatch: 10})

	for i := range 5 {
		mustAppendT(t, a, "direct-a", exactOrNew(i), storetest.NewEvent("test.a", i))
	}
	if n := a.direct.Load(); n != 5 {
		t.Fatalf("%d of 5 groups went straight into partition [0, 100), want 5", n)
	}
	for i := range 12 { // to position 125: b crosses into [100, 200)
		evs := make([]domain.Envelope, 10)
		for j := range evs {
			evs[j] = storetest.NewEvent("test.b", i*10+j)
		}
		mustAppendT(t, b, "direct-b", exactOrNew(i*10), evs...)
	}
	if b.direct.Load() == 0 || b.direct.Load() == b.groups.Load() {
		t.Fatalf("b: %d of %d groups inserted directly; want some (inside a partition) and not all (near its end)", b.direct.Load(), b.groups.Load())
	}

	// a still assumes the head at 5, in [0, 100).
	direct, slow := a.direct.Load(), a.slow.Load()
	res := mustAppendT(t, a, "direct-a", eventstore.Exact(4), storetest.NewEvent("test.a", 5))
	if res.Position != 125 || res.Version != 5 {
		t.Fatalf("a's append after b's: %+v, want position 125, version 5", res)
	}
	if a.slow.Load() != slow+1 || a.direct.Load() != direct {
		t.Fatalf("a's append into the wrong partition: %d careful, %d direct commits; want 1 and 0",
			a.slow.Load()-slow, a.direct.Load()-direct)
	}
	// Now a knows the head: its next group goes straight into [100, 200).
	mustAppendT(t, a, "direct-a", eventstore.Exact(5), storetest.NewEvent("test.a", 6))
	if a.direct.Load() != direct+1 || a.slow.Load() != slow+1 {
		t.Fatalf("a's next append: %d direct, %d careful commits; want 1 and 0", a.direct.Load()-direct, a.slow.Load()-slow-1)
	}

	var where string
	if err := sharedPool.Get(t).QueryRow(ctx, "SELECT tableoid::regclass::text FROM "+schema+".events WHERE position = 126").Scan(&where); err != nil {
		t.Fatal(err)
	}
	if where != schema+".events_100" {
		t.Fatalf("position 126 is in %s, want %s.events_100", where, schema)
	}
	evs, err := b.ReadAll(ctx, 0, 1000)
	if err != nil || len(evs) != 127 {
		t.Fatalf("ReadAll: %d events, %v; want 127", len(evs), err)
	}
	var c eventstore.Chainer
	var prev domain.Hash
	for i := range evs {
		if want := c.Next(prev, &evs[i]); evs[i].Hash != want {
			t.Fatalf("event at %d: hash %s, the chain gives %s", evs[i].Position, evs[i].Hash, want)
		}
		prev = evs[i].Hash
	}
}

// TestPartitionsHaveNoRangeCheck: migration 5 drops the range CHECK of the
// partitions there are, and add_partitions drops it from each new one once
// attached (the partition's bound says the same; see migration 5).
func TestPartitionsHaveNoRangeCheck(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t)
	schema := smallSchema(t, 100)
	s := newStore(t, Options{Schema: schema, MaxBatch: 10})
	for i := range 30 {
		evs := make([]domain.Envelope, 10)
		for j := range evs {
			evs[j] = storetest.NewEvent("test.r", i*10+j)
		}
		mustAppendT(t, s, "range", exactOrNew(i*10), evs...)
	}
	pool := sharedPool.Get(t)
	var parts, checks int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".log_partitions").Scan(&parts); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
		WHERE n.nspname = $1 AND c.contype = 'c' AND c.conname LIKE 'events\_%\_range'`, schema).Scan(&checks); err != nil {
		t.Fatal(err)
	}
	if parts < 4 || checks != 0 {
		t.Fatalf("%d partitions, %d range CHECKs; want at least 4 partitions and no range CHECK", parts, checks)
	}
	// The partitions' bounds still hold: a row outside its partition's bound is refused.
	_, err := pool.Exec(ctx, "INSERT INTO "+schema+".events_0 SELECT * FROM "+schema+".events WHERE position = 150")
	if !isNoPartition(err) {
		t.Fatalf("a row of position 150 inserted into events_0 directly: %v, want a partition constraint violation", err)
	}
}

// exactOrNew is NoStream for version 0 and Exact(v-1) after it.
func exactOrNew(v int) eventstore.ExpectedVersion {
	if v == 0 {
		return eventstore.NoStream
	}
	return eventstore.Exact(uint64(v - 1))
}

// TestDirectStatementGuard: the statement that inserts into a partition
// writes nothing, and fails nothing, when the group's positions do not lie
// in that partition: it answers as for a stale head (the committer then
// decides the group the careful way), instead of leaving the partition's
// bound to refuse the rows with an error that aborts the transaction.
func TestDirectStatementGuard(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t)
	schema := smallSchema(t, 100)
	s := newStore(t, Options{Schema: schema, MaxBatch: 10})
	for i := range 12 {
		evs := make([]domain.Envelope, 10)
		for j := range evs {
			evs[j] = storetest.NewEvent("test.g", i*10+j)
		}
		mustAppendT(t, s, "guard", exactOrNew(i*10), evs...)
	}
	row := []domain.Envelope{storetest.NewEvent("test.g", 120)}
	row[0].Stream, row[0].Version, row[0].Owner = "guard-new", 0, domain.OwnerAPI
	params := fastParams([]string{"guard-new"}, []int64{-1}, []int64{-1}, nil, row, s.sql.channel)
	binary := []int16{1}
	conn, err := sharedPool.Get(t).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, c := range []struct {
		into      directInto
		stale, at int64
	}{
		{directInto{table: schema + ".events_0", name: "events_0", lo: 0, hi: 100}, 1, 120},       // the head lies past it
		{directInto{table: schema + ".events_0", name: "events_0", lo: 0, hi: 200}, 1, 120},       // not the bounds log_partitions lists
		{directInto{table: schema + ".events_100", name: "events_100", lo: 100, hi: 200}, 0, 121}, // the group fits: written
	} {
		sql := fastAppendSQL(s.sql.eventsTable, s.sql.headTable, s.sql.streamsTable, s.sql.partitions, s.sql.chain, c.into)
		res := conn.Conn().PgConn().ExecParams(ctx, sql, params, nil, binary, binary).Read()
		if res.Err != nil || len(res.Rows) != 1 {
			t.Fatalf("into %s [%d, %d): %v, %d rows", c.into.name, c.into.lo, c.into.hi, res.Err, len(res.Rows))
		}
		var stale int64
		if err := conn.Conn().TypeMap().Scan(res.FieldDescriptions[0].DataTypeOID, 1, res.Rows[0][0], &stale); err != nil {
			t.Fatal(err)
		}
		var next int64
		if err := conn.QueryRow(ctx, "SELECT next FROM "+schema+".log_head").Scan(&next); err != nil {
			t.Fatal(err)
		}
		if stale != c.stale || next != c.at {
			t.Fatalf("into %s [%d, %d): stale %d, head %d; want %d, %d", c.into.name, c.into.lo, c.into.hi, stale, next, c.stale, c.at)
		}
	}
}
