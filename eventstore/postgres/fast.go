package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/turnstile/turnstile/domain"
)

// The one-round-trip group commit.
//
// The committer decides a group on heads it assumes (see assume) instead of
// reading them first, and sends, in one pipeline on a connection of its own:
// the log_head lock, a flush request, and one statement that checks the
// assumed heads, inserts the rows at positions counted from log_head.next,
// advances log_head and notifies, followed by Sync, which commits. The check
// runs in a statement of its own after the lock statement, so its snapshot
// sees every transaction that held the lock before. If any assumed head is
// wrong the statement writes nothing (the empty transaction commits) and the
// group is decided again the careful way (stage: lock and lookups first). An
// event id already stored makes the insert fail (UNIQUE (id)); the group is
// then also decided again the careful way, which recognises re-appends.
//
// Two committers take turns: the turn passes to the other one as soon as
// the group in flight holds the lock (the flush request returns the lock
// statement's answer at once), so the next group is decided, sent and queued
// on the lock while the previous one inserts and waits for its WAL flush.

// numCommitters is how many group commit transactions a Store has in
// flight: one holding the lock and one queued behind it.
const numCommitters = 2

// committer is one group commit goroutine's connection, kept for the Store's
// lifetime (reconnected after a failure). Its session plans with seq scans
// off and without JIT: its statements are prepared once, and a generic plan
// made while the log was small must still use the indexes.
type committer struct {
	conn   *pgx.Conn
	lock   *pgconn.StatementDescription
	append *pgconn.StatementDescription // routed through events

	// The append statement that inserts into the partition directFor
	// (direct.go), nil until a group first may.
	direct    *pgconn.StatementDescription
	directFor livePartition
}

// connect opens c's connection if it has none (or a broken one).
func (s *Store) connect(ctx context.Context, c *committer) error {
	if c.conn != nil && !c.conn.IsClosed() {
		return nil
	}
	c.close()
	c.direct, c.directFor = nil, livePartition{}
	cfg := s.pool.Config().ConnConfig // a copy
	cfg.RuntimeParams = maps.Clone(cfg.RuntimeParams)
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["enable_seqscan"] = "off"
	cfg.RuntimeParams["jit"] = "off"
	cfg.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	lock, err := conn.Prepare(ctx, "turnstile_lock", s.sql.lockHead)
	if err == nil {
		c.append, err = conn.Prepare(ctx, "turnstile_append", s.sql.fastAppend)
	}
	if err != nil {
		_ = conn.Close(ctx)
		return err
	}
	c.conn, c.lock = conn, lock
	return nil
}

func (c *committer) close() {
	if c.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.conn.Close(ctx)
		c.conn = nil
	}
}

// isUniqueViolation reports whether err is SQLSTATE 23505.
func isUniqueViolation(err error) bool {
	_, ok := uniqueViolation(err)
	return ok
}

// errStale says the heads a group assumed were not the log's.
var errStale = errors.New("assumed stream heads are stale")

// fastCommit tries group in one round trip (see the top of this file) and
// calls locked once the group holds the log_head lock (or has failed before
// that). It returns the plan with real positions and times, errStale if the
// assumed heads were wrong (nothing written), or the error that stopped it.
// ok is false if the group cannot be tried this way.
func (s *Store) fastCommit(ctx context.Context, c *committer, group []*request, locked func(first uint64, n int)) (p plan, ok bool, err error) {
	heads, streams, lasts, skip, seq, ok := s.heads.assume(group)
	if !ok {
		return plan{}, false, nil
	}
	p = decide(0, heads, map[uuid.UUID]*domain.Envelope{}, group)
	s.heads.plan(seq, heads)
	committed := false
	defer func() { s.heads.done(seq, heads, p.rows, committed) }()

	if err := s.connect(ctx, c); err != nil {
		locked(0, 0)
		return plan{}, true, err
	}
	skip, skipped := headsToCheck(streams, skip, p.rows)
	params := fastParams(streams, lasts, skip, idsToCheck(group), p.rows, s.sql.channel)
	if len(params) != len(c.append.ParamOIDs) {
		locked(0, 0)
		return plan{}, true, fmt.Errorf("postgres: the append statement has %d parameters, want %d", len(c.append.ParamOIDs), len(params))
	}
	stmt, direct := c.append.Name, false
	target, fits := s.directTarget(len(p.rows))
	if fits {
		if name, err := s.directStatement(ctx, c, target); err == nil {
			stmt, direct = name, true
		} else if c.conn.PgConn().IsClosed() {
			locked(0, 0)
			c.close()
			return plan{}, true, err
		} // else: the routed statement
	}
	binary := []int16{pgtype.BinaryFormatCode}
	pl := c.conn.PgConn().StartPipeline(ctx)
	pl.SendQueryPrepared(c.lock.Name, nil, nil, binary)
	pl.SendFlushRequest()
	pl.SendQueryPrepared(stmt, params, binary, binary)
	err = pl.Sync() // sends it all; Sync commits
	var base uint64
	var stale int64
	var ts time.Time
	var hashes [][]byte
	if err == nil {
		base, stale, ts, hashes, err = readFast(c.conn.TypeMap(), pl, func(first uint64) { locked(first, len(p.rows)) })
	}
	locked(0, 0) // if it failed before
	if cerr := pl.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if c.conn.PgConn().IsClosed() || c.conn.PgConn().TxStatus() != 'I' {
			c.close()
		}
		if pgErr, ok := uniqueViolation(err); ok && versionKey(pgErr.ConstraintName) && skipped {
			return plan{}, true, errStale // maybe a stream assumed new, or at its head, was not (see headsToCheck)
		}
		if direct && isUndefinedTable(err) { // the partition was dropped (a trim in another process)
			c.directFor = livePartition{}
			_ = s.loadPartitions(ctx, s.pool)
			return plan{}, true, errStale
		}
		return plan{}, true, err
	}
	if stale > 0 {
		if direct && (int64(base) < target.lo || int64(base)+int64(len(p.rows)) > target.hi) {
			// The head had left that partition (another Store moved it):
			// see where the head and the partitions are now.
			_ = s.loadPartitions(ctx, s.pool)
		}
		return plan{}, true, errStale
	}
	committed = true
	if direct {
		s.direct.Add(1)
	}
	for i := range p.rows {
		p.rows[i].Position += base
		p.rows[i].Time = ts
	}
	if err := setHashes(p.rows, hashes); err != nil {
		return plan{}, true, err
	}
	for i := range p.outcomes {
		if p.outcomes[i].err == nil {
			p.outcomes[i].res.Position += base
		}
	}
	p.next += base
	return p, true, nil
}

// headsToCheck returns, for each assumed head of streams, the position
// from which the append statement may leave its check to the unique
// constraints (skip, from assume; -1: always check), and whether it may
// leave out any. Only a stream the group writes can be left out: one
// assumed to have no events (newStream: the primary key of streams refuses
// its first event if it has events anywhere), and one at the head a commit
// of this Store left, with that commit's last event at skip. For the
// latter UNIQUE (stream, version) checks the assumption as the rows go in
// (a stream that moved on already holds the version written next), but only
// within one partition: the statement checks the head anyway unless skip
// lies in the partition of the group's last row and in the live log. A
// violation fails the whole group, which is then decided again the careful
// way. A condition (a stream the group does not write) is always checked.
// Each probe saved is an index search (of every live partition) under the
// log_head lock: about five in six streams of the lifecycle are left out
// this way.
func headsToCheck(streams []string, skip []int64, rows []domain.Envelope) ([]int64, bool) {
	written := make(map[string]bool, len(streams))
	for i := range rows {
		written[rows[i].Stream] = true
	}
	out, skipped := make([]int64, len(streams)), false
	for i, st := range streams {
		out[i] = -1
		if skip[i] >= 0 && written[st] {
			out[i], skipped = skip[i], true
		}
	}
	return out, skipped
}

// idsToCheck returns the ids of the events the group appends with Any or
// StreamExists. UNIQUE (id) holds per partition only; for the other
// expected versions, a re-append is refused by the version checks and then
// recognised the careful way, but one of these, on a stream at the head it
// assumes, is not: the statement looks for their ids in the live log's
// older partitions.
func idsToCheck(group []*request) [][16]byte {
	var ids [][16]byte
	for _, r := range group {
		for _, a := range r.appends {
			if a.Expected.IsAny() || a.Expected.IsStreamExists() {
				for i := range a.Events {
					ids = append(ids, a.Events[i].ID)
				}
			}
		}
	}
	return ids
}

// readFast reads the answers of fastCommit's pipeline: the lock statement's
// (then it calls locked), the append statement's, and the Sync's.
func readFast(m *pgtype.Map, pl *pgconn.Pipeline, locked func(first uint64)) (base uint64, stale int64, ts time.Time, hashes [][]byte, err error) {
	var next int64
	if err := readRow(m, pl, &next); err != nil {
		return 0, 0, time.Time{}, nil, fmt.Errorf("locking log_head: %w", err)
	}
	locked(uint64(next))
	var notified int64
	err = readRow(m, pl, &stale, &next, &ts, &notified, &hashes)
	if _, serr := pl.GetResults(); err == nil { // the Sync: the commit
		err = serr
	}
	return uint64(next), stale, ts.UTC(), hashes, err
}

// readRow reads the next result of pl, which must be one row, into dst.
func readRow(m *pgtype.Map, pl *pgconn.Pipeline, dst ...any) error {
	res, err := pl.GetResults()
	if err != nil {
		return err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return fmt.Errorf("postgres: unexpected pipeline result %T", res)
	}
	rows := 0
	var scanErr error
	for rr.NextRow() {
		rows++
		vals := rr.Values()
		fds := rr.FieldDescriptions()
		if len(vals) != len(dst) {
			scanErr = fmt.Errorf("postgres: %d columns, want %d", len(vals), len(dst))
			continue
		}
		for i := range vals {
			if scanErr == nil {
				scanErr = m.Scan(fds[i].DataTypeOID, fds[i].Format, vals[i], dst[i])
			}
		}
	}
	if _, err := rr.Close(); err != nil {
		return err
	}
	if scanErr == nil && rows != 1 {
		scanErr = fmt.Errorf("postgres: %d rows, want 1", rows)
	}
	return scanErr
}

// PostgreSQL type OIDs of the append statement's parameters.
const (
	oidBytea = 17
	oidInt8  = 20
	oidText  = 25
	oidUUID  = 2950
)

// fastParams encodes the append statement's parameters in binary: the
// assumed heads with their skip positions, the ids to look for in older
// partitions, the rows' columns (all but position and time) as arrays,
// the number of rows and the channel.
func fastParams(streams []string, lasts, skip []int64, ids [][16]byte, rows []domain.Envelope, channel string) [][]byte {
	n := len(rows)
	str := func(f func(e *domain.Envelope) string) []byte {
		return binaryArray(oidText, n, func(b []byte, i int) ([]byte, bool) { return append(b, f(&rows[i])...), true })
	}
	i64 := func(f func(e *domain.Envelope) int64) []byte {
		return binaryArray(oidInt8, n, func(b []byte, i int) ([]byte, bool) {
			return binary.BigEndian.AppendUint64(b, uint64(f(&rows[i]))), true
		})
	}
	bytea := func(f func(e *domain.Envelope) []byte) []byte {
		return binaryArray(oidBytea, n, func(b []byte, i int) ([]byte, bool) {
			v := f(&rows[i])
			return append(b, v...), v != nil
		})
	}
	return [][]byte{
		binaryArray(oidText, len(streams), func(b []byte, i int) ([]byte, bool) { return append(b, streams[i]...), true }),
		binaryArray(oidInt8, len(lasts), func(b []byte, i int) ([]byte, bool) { return binary.BigEndian.AppendUint64(b, uint64(lasts[i])), true }),
		binaryArray(oidInt8, len(skip), func(b []byte, i int) ([]byte, bool) { return binary.BigEndian.AppendUint64(b, uint64(skip[i])), true }),
		binaryArray(oidUUID, len(ids), func(b []byte, i int) ([]byte, bool) { return append(b, ids[i][:]...), true }),
		str(func(e *domain.Envelope) string { return e.Stream }),
		i64(func(e *domain.Envelope) int64 { return int64(e.Version) }),
		binaryArray(oidUUID, n, func(b []byte, i int) ([]byte, bool) { return append(b, rows[i].ID[:]...), true }),
		str(func(e *domain.Envelope) string { return e.Type }),
		i64(func(e *domain.Envelope) int64 { return int64(e.SchemaVersion) }),
		str(func(e *domain.Envelope) string { return string(e.Owner) }),
		str(func(e *domain.Envelope) string { return e.CorrelationID }),
		str(func(e *domain.Envelope) string { return e.CausationID }),
		str(func(e *domain.Envelope) string { return e.Writer }),
		bytea(func(e *domain.Envelope) []byte { return e.Data }),
		bytea(func(e *domain.Envelope) []byte { return e.Metadata }),
		binary.BigEndian.AppendUint64(nil, uint64(n)),
		[]byte(channel),
		binaryArray(oidBytea, n, func(b []byte, i int) ([]byte, bool) { return append(b, chainTail(&rows[i])...), true }),
	}
}

// binaryArray encodes a one-dimensional array of n elements of type oid in
// PostgreSQL's binary format; elem appends element i's binary form to b and
// says whether it is not NULL.
func binaryArray(oid uint32, n int, elem func(b []byte, i int) ([]byte, bool)) []byte {
	if n == 0 {
		b := binary.BigEndian.AppendUint32(nil, 0) // no dimensions
		b = binary.BigEndian.AppendUint32(b, 0)
		return binary.BigEndian.AppendUint32(b, oid)
	}
	b := make([]byte, 20, 20+n*24)
	binary.BigEndian.PutUint32(b[0:], 1) // dimensions
	binary.BigEndian.PutUint32(b[8:], oid)
	binary.BigEndian.PutUint32(b[12:], uint32(n))
	binary.BigEndian.PutUint32(b[16:], 1) // lower bound
	hasNull := false
	for i := range n {
		at := len(b)
		b = append(b, 0, 0, 0, 0)
		var ok bool
		if b, ok = elem(b, i); ok {
			binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
		} else {
			binary.BigEndian.PutUint32(b[at:], 0xffffffff) // -1: NULL
			hasNull = true
		}
	}
	if hasNull {
		binary.BigEndian.PutUint32(b[4:], 1)
	}
	return b
}

// fastAppendSQL is the append statement of the one-round-trip commit. $1,
// $2, $3: the streams, the last versions assumed for them, and from which
// position their check may be left to the unique constraints (see
// headsToCheck); $4: ids to look for in the live log's older partitions
// (idsToCheck); $5–$15: the rows' columns but position, time and hash; $16:
// the number of rows; $17: the NOTIFY channel; $18: the rows' chainTail.
// It answers one row: how many
// assumed heads were wrong or ids found (0: the rows were written),
// log_head.next before the rows (their first position), the commit time
// written, how many notifications it sent, and the rows' hashes in position
// order (chained after log_head.hash, which it advances with next). A
// stream's first event enters streams. The hashes come from one call of
// chain_run (migration 4) for the whole group, which then goes into the
// insert straight from the parameters, without a materialised window.
func fastAppendSQL(events, head, streams, partitions string, fn chainFuncs, d directInto) string {
	// head: log_head read once (next, hash, the live log's start, the time
	// the chain encodes) and lo, where the partition of the group's last row
	// begins; every look-up below takes them from there instead of reading
	// log_head again in a subquery of its own.
	outside := "" // for a statement that inserts into a partition: 1 if the group does not lie in it
	if d.table != "" {
		outside = ` + (SELECT CASE WHEN ` + d.guard(partitions) + ` THEN 0 ELSE 1 END FROM head)`
	}
	return `WITH head AS (
		SELECT h.next, h.hash, h.start, ` + microsNow + ` AS at,
			` + d.lower(partitions) + ` AS lo
		FROM ` + head + ` h
	), stale AS (
		SELECT (SELECT count(*) FROM head, unnest($1::text[], $2::bigint[], $3::bigint[]) AS g(stream, last, skip)
			WHERE (g.skip < head.lo OR g.skip < head.start)
			AND coalesce(` + streamHeadBelow(events, streams, "head.start", "g.stream", d.below()) + `, -1) <> g.last)
		+ (SELECT count(*) FROM head, ` + events + ` e WHERE cardinality($4::uuid[]) > 0
			AND e.id = ANY($4::uuid[]) AND e.position + 0 >= head.start AND e.position < ` + d.lowerConst() + `)` + outside + ` AS n
	), hashes AS (
		SELECT CASE WHEN stale.n = 0 THEN ` + fn.run + `(head.hash, head.next, head.at, $6::bigint[], $7::uuid[], $18::bytea[])
			ELSE '{}'::bytea[] END AS hs
		FROM head, stale
	), ins AS (
		INSERT INTO ` + d.into(events) + ` (` + columns + `)
		SELECT head.next + r.ord - 1, r.stream, r.version, r.id, r.type, r.schema_version, statement_timestamp(),
			r.owner, r.correlation_id, r.causation_id, r.writer, r.data, r.metadata, r.hash
		FROM head, stale, hashes, unnest($5::text[], $6::bigint[], $7::uuid[], $8::text[], $9::bigint[],
			$10::text[], $11::text[], $12::text[], $13::text[], $14::bytea[], $15::bytea[], hashes.hs)
			WITH ORDINALITY AS r(stream, version, id, type, schema_version, owner, correlation_id, causation_id, writer, data, metadata, hash, ord)
		WHERE stale.n = 0
	), new AS (
		INSERT INTO ` + streams + ` (stream, first_position)
		SELECT n.stream, head.next + n.ord - 1
		FROM head, stale, unnest($5::text[], $6::bigint[]) WITH ORDINALITY AS n(stream, version, ord)
		WHERE stale.n = 0 AND n.version = 0
	), moved AS (
		UPDATE ` + head + ` SET next = ` + head + `.next + $16::bigint, hash = hashes.hs[$16::bigint]
		FROM stale, hashes WHERE stale.n = 0 AND $16::bigint > 0
		RETURNING ` + head + `.next
	)
	SELECT stale.n, head.next, statement_timestamp(),
		(SELECT count(*) FROM (SELECT pg_notify($17::text, moved.next::text) FROM moved) AS x),
		hashes.hs
	FROM stale, head, hashes`
}
