package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
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
	append *pgconn.StatementDescription
}

// connect opens c's connection if it has none (or a broken one).
func (s *Store) connect(ctx context.Context, c *committer) error {
	if c.conn != nil && !c.conn.IsClosed() {
		return nil
	}
	c.close()
	cfg := s.pool.Config().ConnConfig // a copy
	cfg.RuntimeParams = maps.Clone(cfg.RuntimeParams)
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["enable_seqscan"] = "off"
	cfg.RuntimeParams["jit"] = "off"
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

// headCache remembers streams' last versions as this Store's commits left
// them, for appends with Any or StreamExists, and the heads the group in
// flight will leave (pending), for the group decided after it. Both are
// only assumptions: the append statement checks them.
type headCache struct {
	mu       sync.Mutex
	seq      uint64                // groups decided
	cur, old map[string]cachedHead // two generations: cur is cleared into old when full
	pending  map[string]cachedHead
}

type cachedHead struct {
	last int64  // last version, -1: no events
	seq  uint64 // the group that left it
}

// headCacheSize bounds one generation of the cache.
const headCacheSize = 50_000

func (h *headCache) get(stream string) (cachedHead, bool) {
	if v, ok := h.cur[stream]; ok {
		return v, true
	}
	v, ok := h.old[stream]
	return v, ok
}

// assume returns the head to assume for every stream of group, in the
// order the streams first appear, with the group's sequence number; ok is
// false if some stream's head cannot be assumed (an append with Any or
// StreamExists to a stream this Store has not seen lately). For each stream
// it takes, in order: the head the group in flight will leave, the head the
// first append to it expects (Exact, NoStream), the cached head. known[i]
// says whether streams[i]'s assumed head is known to be in the log: no
// events, or a version that a commit of this Store reached (events are
// never removed).
func (h *headCache) assume(group []*request) (heads map[string]int64, streams []string, lasts []int64, known []bool, seq uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	heads = make(map[string]int64)
	for _, r := range group {
		for _, a := range r.appends {
			if _, seen := heads[a.Stream]; seen {
				continue
			}
			c, cached := h.get(a.Stream)
			last, assumed := int64(0), false
			if p, ok := h.pending[a.Stream]; ok {
				last, assumed = p.last, true
			} else if v, exact := a.Expected.Exact(); exact {
				last, assumed = int64(v), true
			} else if a.Expected == eventstore.NoStream {
				last, assumed = -1, true
			} else if cached {
				last, assumed = c.last, true
			}
			if !assumed {
				return nil, nil, nil, nil, 0, false
			}
			heads[a.Stream] = last
			streams = append(streams, a.Stream)
			lasts = append(lasts, last)
			known = append(known, last == -1 || cached && c.last >= last)
		}
	}
	h.seq++
	return heads, streams, lasts, known, h.seq, true
}

// begin returns the sequence number of a group decided the careful way.
func (h *headCache) begin() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	return h.seq
}

// plan records the heads a group decided at seq will leave as pending.
func (h *headCache) plan(seq uint64, heads map[string]int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pending == nil {
		h.pending = make(map[string]cachedHead)
	}
	for stream, last := range heads {
		h.pending[stream] = cachedHead{last, seq}
	}
}

// done ends group seq: its pending heads are dropped and, if it committed,
// heads (what the log now holds) go into the cache.
func (h *headCache) done(seq uint64, heads map[string]int64, committed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for stream := range heads {
		if p, ok := h.pending[stream]; ok && p.seq == seq {
			delete(h.pending, stream)
		}
	}
	if !committed {
		return
	}
	if h.cur == nil || len(h.cur) >= headCacheSize {
		h.old, h.cur = h.cur, make(map[string]cachedHead, len(heads))
	}
	for stream, last := range heads {
		if c, ok := h.get(stream); !ok || c.seq <= seq {
			h.cur[stream] = cachedHead{last, seq}
		}
	}
}

// forget drops every cached head (after a commit whose outcome is unknown).
func (h *headCache) forget() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cur, h.old = nil, nil
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
	heads, streams, lasts, known, seq, ok := s.heads.assume(group)
	if !ok {
		return plan{}, false, nil
	}
	p = decide(0, heads, map[uuid.UUID]*domain.Envelope{}, group)
	s.heads.plan(seq, heads)
	committed := false
	defer func() { s.heads.done(seq, heads, committed) }()

	if err := s.connect(ctx, c); err != nil {
		locked(0, 0)
		return plan{}, true, err
	}
	checkStreams, checkLasts := headsToCheck(streams, lasts, known, p.rows)
	params := fastParams(checkStreams, checkLasts, p.rows, s.sql.channel)
	if len(params) != len(c.append.ParamOIDs) {
		locked(0, 0)
		return plan{}, true, fmt.Errorf("postgres: the append statement has %d parameters, want %d", len(c.append.ParamOIDs), len(params))
	}
	binary := []int16{pgtype.BinaryFormatCode}
	pl := c.conn.PgConn().StartPipeline(ctx)
	pl.SendQueryPrepared(c.lock.Name, nil, nil, binary)
	pl.SendFlushRequest()
	pl.SendQueryPrepared(c.append.Name, params, binary, binary)
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
		if pgErr, ok := uniqueViolation(err); ok && pgErr.ConstraintName == "events_stream_version_key" && len(checkStreams) < len(streams) {
			return plan{}, true, errStale // maybe a stream assumed new was not (see headsToCheck)
		}
		return plan{}, true, err
	}
	if stale > 0 {
		return plan{}, true, errStale
	}
	committed = true
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

// headsToCheck returns the assumed heads the append statement must check.
// It leaves out the streams the group writes whose assumed head is known to
// be in the log (known, from assume): those assumed to have no events, and
// those at a version that a commit of this Store left or passed. For them
// UNIQUE (stream, version) checks the assumption as the rows go in (a stream
// that moved on already holds the version written next), and a violation fails
// the whole group, which is then decided again the careful way. A condition
// (a stream the group does not write) is always checked. Each probe saved is
// an index search under the log_head lock: about five in six streams of the
// lifecycle are left out this way.
func headsToCheck(streams []string, lasts []int64, known []bool, rows []domain.Envelope) ([]string, []int64) {
	written := make(map[string]bool, len(streams))
	for i := range rows {
		written[rows[i].Stream] = true
	}
	cs, cl := streams[:0:0], lasts[:0:0]
	for i, st := range streams {
		if known[i] && written[st] {
			continue
		}
		cs, cl = append(cs, st), append(cl, lasts[i])
	}
	return cs, cl
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
// assumed heads, the rows' columns (all but position and time) as arrays,
// the number of rows and the channel.
func fastParams(streams []string, lasts []int64, rows []domain.Envelope, channel string) [][]byte {
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
// $2: the streams and the last versions assumed for them; $3–$13: the rows'
// columns but position, time and hash; $14: the number of rows; $15: the
// NOTIFY channel. It answers one row: how many assumed heads were wrong (0:
// the rows were written), log_head.next before the rows (their first
// position), the commit time written, how many notifications it sent, and
// the rows' hashes in position order (chained after log_head.hash, which it
// advances with next).
func fastAppendSQL(events, head string, fn chainFuncs) string {
	return `WITH stale AS (
		SELECT count(*) AS n FROM unnest($1::text[], $2::bigint[]) AS g(stream, last)
		WHERE coalesce((SELECT max(e.version) FROM ` + events + ` e WHERE e.stream = g.stream), -1) <> g.last
	), head AS (
		SELECT next, hash FROM ` + head + `
	), rows AS (
		SELECT head.next + r.ord - 1 AS position, r.*
		FROM head, stale, unnest($3::text[], $4::bigint[], $5::uuid[], $6::text[], $7::bigint[],
			$8::text[], $9::text[], $10::text[], $11::text[], $12::bytea[], $13::bytea[])
			WITH ORDINALITY AS r(stream, version, id, type, schema_version, owner, correlation_id, causation_id, writer, data, metadata, ord)
		WHERE stale.n = 0
	), chained AS (
		SELECT r.*, ` + fn.over("head.hash", "r.ord", "r") + ` AS hash FROM head, rows r
	), ins AS (
		INSERT INTO ` + events + ` (` + columns + `)
		SELECT c.position, c.stream, c.version, c.id, c.type, c.schema_version, statement_timestamp(),
			c.owner, c.correlation_id, c.causation_id, c.writer, c.data, c.metadata, c.hash
		FROM chained c
	), moved AS (
		UPDATE ` + head + ` SET next = ` + head + `.next + $14::bigint,
			hash = (SELECT c.hash FROM chained c ORDER BY c.ord DESC LIMIT 1)
		FROM stale WHERE stale.n = 0 AND $14::bigint > 0
		RETURNING ` + head + `.next
	)
	SELECT stale.n, head.next, statement_timestamp(),
		(SELECT count(*) FROM (SELECT pg_notify($15::text, moved.next::text) FROM moved) AS x),
		coalesce((SELECT array_agg(c.hash ORDER BY c.ord) FROM chained c), '{}')
	FROM stale, head`
}
