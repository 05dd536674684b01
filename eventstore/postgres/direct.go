package postgres

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Inserting straight into the current partition.
//
// A row inserted through events is routed: PostgreSQL finds its partition
// and sets up, at every execution, the routing of the partitioned table and
// its partitioned indexes. The one-round-trip append inserts into the
// partition instead when the group surely lies in one: the committer keeps,
// on its connection, the append statement for the partition that holds the
// head its Store last saw (directStatement), prepared once per partition,
// and uses it when the group, and the group still in flight before it, end
// well inside that partition (directTarget). The statement itself checks,
// under the log_head lock, that log_partitions lists that partition with
// the same bounds and that the group's positions lie in them; if not
// (another Store moved the head across the bound, or a partition was
// remade), it writes nothing, as for a stale head, and the group is decided
// again the careful way, which routes its rows; if the head it answers lies
// outside the partition, the Store reads the partitions and the head again. PostgreSQL checks a row
// inserted into a partition directly against the partition's bound as well,
// so a row can never land outside it. Near a bound the routed statement is
// used, so the careful way is taken only when another writer moved the head.

// livePartition is one row of log_partitions: the positions [lo, hi) of the
// table name.
type livePartition struct {
	lo, hi int64
	name   string
}

// directTarget returns the partition the group of n events may be inserted
// into directly: the one that holds the head this Store last saw, if that
// head plus the group, plus a whole group still in flight before it, stays
// below the partition's end. ok is false if the routed statement is to be
// used.
func (s *Store) directTarget(n int) (p livePartition, ok bool) {
	list := s.parts.list.Load()
	if list == nil {
		return livePartition{}, false
	}
	head := int64(s.parts.head.Load())
	inFlight := int64(max(s.opts.MaxBatch, n))
	for _, p := range *list {
		if p.lo <= head && head+int64(n)+inFlight < p.hi {
			return p, true
		}
	}
	return livePartition{}, false
}

// directStatement returns c's append statement for partition p, preparing
// it (and letting go of the one for the previous partition) if c has none
// for p yet.
func (s *Store) directStatement(ctx context.Context, c *committer, p livePartition) (string, error) {
	if c.direct != nil && c.directFor == p {
		return c.direct.Name, nil
	}
	const name = "turnstile_append_direct"
	if c.direct != nil {
		if err := c.conn.Deallocate(ctx, name); err != nil {
			return "", err
		}
		c.direct = nil
	}
	sd, err := c.conn.Prepare(ctx, name, fastAppendSQL(s.sql.eventsTable, s.sql.headTable, s.sql.streamsTable, s.sql.partitions, s.sql.chain,
		directInto{table: pgx.Identifier{s.opts.Schema, p.name}.Sanitize(), name: p.name, lo: p.lo, hi: p.hi}))
	if err != nil {
		return "", err
	}
	c.direct, c.directFor = sd, p
	return name, nil
}

// directInto is the partition an append statement inserts into directly;
// the zero value means events (routed).
type directInto struct {
	table  string // the partition, schema-qualified and quoted
	name   string // as log_partitions names it
	lo, hi int64
}

// guard is the SQL that is true when the group's positions, from head.next
// on, lie in the partition and log_partitions lists it with the bounds the
// statement was prepared for ("true" for the routed statement).
func (d directInto) guard(partitions string) string {
	if d.table == "" {
		return "true"
	}
	lo, hi := strconv.FormatInt(d.lo, 10), strconv.FormatInt(d.hi, 10)
	return `(head.next >= ` + lo + ` AND head.next + $16::bigint <= ` + hi + ` AND EXISTS (SELECT 1 FROM ` + partitions +
		` p WHERE p.lo = ` + lo + ` AND p.hi = ` + hi + ` AND p.name = ` + quoteLiteral(d.name) + `))`
}

// below is the further condition of the statement's look-ups by stream:
// none for the routed statement; for one that inserts into the partition,
// that the event lies below the partition's end. Every event in the log
// does when the guard holds (the group's positions, from head.next on, lie
// in the partition), and a condition on position with a constant lets the
// planner leave the partitions ahead out of the plan: the look-ups run at
// every execution, each an index search per partition left in.
func (d directInto) below() string {
	if d.table == "" {
		return ""
	}
	return ` AND e.position < ` + strconv.FormatInt(d.hi, 10)
}

// lower is the SQL for where the partition of the group's last row begins
// (head.lo): read from log_partitions for the routed statement; for one
// that inserts into the partition, that partition's lo, a constant (the
// same when the guard holds).
func (d directInto) lower(partitions string) string {
	if d.table == "" {
		return `(SELECT coalesce(max(p.lo), 0) FROM ` + partitions + ` p WHERE p.lo <= h.next + $16::bigint - 1)`
	}
	return strconv.FormatInt(d.lo, 10) + `::bigint`
}

// lowerConst is lower where the statement looks for the group's ids below
// it (see idsToCheck): head.lo for the routed statement, the constant for
// one that inserts into the partition, so that the planner leaves that
// partition and those ahead out of the look-up (on the log's first
// partition, the whole look-up).
func (d directInto) lowerConst() string {
	if d.table == "" {
		return "head.lo"
	}
	return strconv.FormatInt(d.lo, 10)
}

// into is the table the statement inserts into.
func (d directInto) into(events string) string {
	if d.table == "" {
		return events
	}
	return d.table
}

// quoteLiteral quotes s as an SQL string literal (standard_conforming_strings
// on, PostgreSQL's default since 9.1).
func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}

// isUndefinedTable reports whether err is PostgreSQL's SQLSTATE 42P01: a
// statement names a table that no longer exists.
func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}
