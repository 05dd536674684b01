package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// Store is a PostgreSQL eventstore.Store. It is safe for concurrent use, and
// any number of Stores, in any number of processes, may share one schema.
type Store struct {
	pool    *pgxpool.Pool
	ownPool bool // opened by OpenURL: Close closes it
	opts    Options
	sql     statements

	mu      sync.Mutex
	queue   []*request // appends waiting for the committer
	closing bool
	kick    chan struct{} // buffered: the committer has work
	closed  chan struct{} // closed by Close
	wake    waker         // woken when events may have committed
	groups  atomic.Int64  // group commit transactions run (for benchmarks)
	slow    atomic.Int64  // of which decided the careful way (stage)
	direct  atomic.Int64  // of which inserted straight into a partition (direct.go)
	turn    chan struct{} // the committers' token: who decides and sends the next group
	heads   headCache
	feed    feed
	parts   partitions

	ctx        context.Context // the listener's; cancelled by Close
	cancel     context.CancelFunc
	listenOnce sync.Once
	wg         sync.WaitGroup // the committer and the listener
	closeOnce  sync.Once
}

var _ eventstore.Store = (*Store)(nil)

// Open returns a Store on the log in opts.Schema of the database pool
// connects to. It never changes the database: if the schema is missing or
// not at SchemaVersion it fails with an error wrapping ErrSchemaNotReady (or
// ErrSchemaTooNew) that says to run `turnstile migrate` (Migrate). If the
// database runs with fsync or synchronous_commit off (as a connection of
// pool sees them), it fails with an error wrapping ErrNotDurable, unless
// opts.AllowNotDurable. Close does not close pool.
func Open(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if err := checkSchema(ctx, pool, opts.Schema); err != nil {
		return nil, err
	}
	if err := checkDurable(ctx, pool, opts); err != nil {
		return nil, err
	}
	s := &Store{
		pool:   pool,
		opts:   opts,
		sql:    newStatements(opts.Schema),
		kick:   make(chan struct{}, 1),
		closed: make(chan struct{}),
		turn:   make(chan struct{}, 1),
	}
	if err := s.loadPartitions(ctx, pool); err != nil {
		return nil, err
	}
	if err := s.finishTrim(ctx); err != nil {
		return nil, err
	}
	s.wake.ch = make(chan struct{})
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.turn <- struct{}{}
	for range numCommitters {
		s.wg.Go(s.commitLoop)
	}
	return s, nil
}

// OpenURL opens a pool on the database a URL names and a Store on it, as
// Open does; Close closes both. The URL is
// postgres://user:password@host:port/database?param=value&… (postgresql://
// too), with libpq's parameters (sslmode, …) and pgxpool's (pool_max_conns,
// …). A "schema" parameter names the schema when opts.Schema is "" (and must
// agree with it otherwise); allow_not_durable=true sets
// opts.AllowNotDurable.
func OpenURL(ctx context.Context, url string, opts Options) (*Store, error) {
	cfg, schema, allow, err := parseURL(url, opts.Schema)
	if err != nil {
		return nil, err
	}
	opts.Schema = schema
	opts.AllowNotDurable = opts.AllowNotDurable || allow
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s, err := Open(ctx, pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownPool = true
	return s, nil
}

// parseURL checks a postgres:// URL, takes its own parameters out ("schema"
// and "allow_not_durable": they are the store's, not server settings) and
// returns the pool configuration, the schema to use and whether
// allow_not_durable=true.
func parseURL(raw, schema string) (*pgxpool.Config, string, bool, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", false, fmt.Errorf("postgres: store URL: %w", err) // url.Error hides the password
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, "", false, fmt.Errorf("postgres: store URL scheme %q: want postgres:// or postgresql://", u.Scheme)
	}
	q := u.Query()
	if v := q.Get("schema"); v != "" {
		if schema != "" && schema != v {
			return nil, "", false, fmt.Errorf("postgres: store URL names schema %q, the options %q", v, schema)
		}
		schema = v
	}
	allow := false
	if q.Has("allow_not_durable") {
		v := q.Get("allow_not_durable")
		if v != "true" && v != "false" {
			return nil, "", false, fmt.Errorf("postgres: store URL: allow_not_durable=%q: want true or false", v)
		}
		allow = v == "true"
	}
	q.Del("schema")
	q.Del("allow_not_durable")
	u.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, "", false, fmt.Errorf("postgres: store URL: %w", err)
	}
	return cfg, schema, allow, nil
}

// statements are the store's SQL, with its schema spelled out.
type statements struct {
	channel       string // NOTIFY channel: "<schema>.log"
	listen        string
	head          string
	start         string
	headTable     string // the tables and the function, spelled out
	eventsTable   string
	streamsTable  string
	partitions    string
	addPartitions string
	lockHead      string
	setHead       string
	notify        string
	streamHeads   string
	storedByID    string
	insert        string
	readAll       string
	readStream    string
	streamExists  string
	readPage      string
	fastAppend    string
	chain         chainFuncs
}

// Plans. A prepared statement's generic plan is made for the table as it is
// when the statement has run five times, and kept until the table is next
// analyzed: a plan made while the log was empty or small (a seq scan for a
// stream's events or an event id) would be used while it grows by millions of
// rows, for up to a minute after a fresh migration, or far longer between
// autovacuum's analyzes. So reads run as unnamed statements, planned for
// their parameters each time (describe, some tens of microseconds), and the
// lookups of an append, which run while it holds the log_head lock, are
// planned with seq scans disabled (indexPlans … seqScans), so that even their
// cached plans use the indexes. Only those two: a statement planned with seq
// scans disabled that has no other path (log_head has no useful index) gets a
// huge cost estimate, and with it JIT compilation.
const (
	describe   = pgx.QueryExecModeCacheDescribe
	indexPlans = "SET LOCAL enable_seqscan = off"
	seqScans   = "SET LOCAL enable_seqscan TO DEFAULT"
)

// columns are the events columns, in the order scanEvent reads them.
const columns = `position, stream, version, id, type, schema_version, committed_at, owner, correlation_id, causation_id, writer, data, metadata, hash`

func newStatements(schema string) statements {
	events := pgx.Identifier{schema, "events"}.Sanitize()
	head := pgx.Identifier{schema, "log_head"}.Sanitize()
	streams := pgx.Identifier{schema, "streams"}.Sanitize()
	partitions := pgx.Identifier{schema, "log_partitions"}.Sanitize()
	fn := chainFuncs{chain: pgx.Identifier{schema, "chain"}.Sanitize(), run: pgx.Identifier{schema, "chain_run"}.Sanitize()}
	channel := schema + ".log"
	// start is the live log's first position: every read and every look-up
	// leaves out what lies below it (rows a trim has not dropped yet). The
	// look-ups by stream or id compare position + 0 with it, so that the
	// planner, which cannot know how far the start is, keeps to their
	// indexes instead of scanning positions from the start.
	start := `(SELECT start FROM ` + head + ` WHERE only_row)`
	return statements{
		channel:       channel,
		listen:        "LISTEN " + pgx.Identifier{channel}.Sanitize(),
		head:          `SELECT next FROM ` + head,
		start:         `SELECT start, start_hash FROM ` + head,
		headTable:     head,
		eventsTable:   events,
		streamsTable:  streams,
		partitions:    partitions,
		addPartitions: pgx.Identifier{schema, "add_partitions"}.Sanitize(),
		lockHead:      `SELECT next FROM ` + head + ` FOR UPDATE`,
		// The hash of the event at next - 1, which the insert before it wrote.
		setHead:     `UPDATE ` + head + ` SET next = $1::bigint, hash = (SELECT hash FROM ` + events + ` WHERE position = $1::bigint - 1)`,
		notify:      `SELECT pg_notify($1, $2)`,
		streamHeads: `SELECT q.stream, ` + streamHead(events, streams, start, "q.stream") + ` FROM unnest($1::text[]) AS q(stream)`,
		storedByID:  `SELECT ` + columns + ` FROM ` + events + ` WHERE id = ANY($1::uuid[]) AND position + 0 >= ` + start,
		// statement_timestamp(): one commit time for the whole group, taken
		// after the log_head lock, so it never goes back along positions
		// (unless the server's clock does).
		// The rows are chained after log_head.hash, in position order; a
		// stream's first event enters streams (see migration 3).
		insert: `WITH h AS (SELECT hash, ` + microsNow + ` AS at FROM ` + head + `), rows AS (
				SELECT e.*, ` + fn.over("h.hash", "h.at", "e.position", "e") + ` AS hash
				FROM h, unnest($1::bigint[], $2::text[], $3::bigint[], $4::uuid[], $5::text[], $6::bigint[],
					$7::text[], $8::text[], $9::text[], $10::text[], $11::bytea[], $12::bytea[], $13::bytea[])
					AS e(position, stream, version, id, type, schema_version, owner, correlation_id, causation_id, writer, data, metadata, tail)
			), ins AS (INSERT INTO ` + events + ` (` + columns + `)
				SELECT r.position, r.stream, r.version, r.id, r.type, r.schema_version, statement_timestamp(),
					r.owner, r.correlation_id, r.causation_id, r.writer, r.data, r.metadata, r.hash
				FROM rows r
			), new AS (INSERT INTO ` + streams + ` (stream, first_position)
				SELECT r.stream, r.position FROM rows r WHERE r.version = 0)
			SELECT statement_timestamp(), (SELECT array_agg(hash ORDER BY position) FROM rows)`,
		fastAppend: fastAppendSQL(events, head, streams, partitions, fn, directInto{}),
		chain:      fn,
		// Nothing if from is below the live log's start (ReadAll then asks
		// for the start).
		readAll:    `SELECT ` + columns + ` FROM ` + events + ` WHERE position >= $1 AND $1 >= ` + start + ` ORDER BY position LIMIT $2`,
		readStream: `SELECT ` + columns + ` FROM ` + events + ` WHERE stream = $1 AND version >= $2 AND position + 0 >= ` + start + ` ORDER BY version LIMIT $3`,
		streamExists: `SELECT EXISTS (SELECT 1 FROM ` + events + ` WHERE stream = $1 AND position + 0 >= ` + start + `)
			OR EXISTS (SELECT 1 FROM ` + streams + ` WHERE stream = $1 AND trimmed_last IS NOT NULL)`,
		// One row per event, each also carrying the head, or, if no event
		// matches, one row with the head and position -1. The head is a
		// scalar subquery (evaluated once): log_head is never analyzed, and
		// joined as a table its row estimate would make the plan look
		// costly enough for JIT compilation.
		readPage: `SELECT (SELECT next FROM ` + head + `), ` + start + `, coalesce(e.position, -1), coalesce(e.stream, ''), coalesce(e.version, 0),
				coalesce(e.id, '00000000-0000-0000-0000-000000000000'), coalesce(e.type, ''), coalesce(e.schema_version, 0),
				coalesce(e.committed_at, 'epoch'), coalesce(e.owner, ''), coalesce(e.correlation_id, ''),
				coalesce(e.causation_id, ''), coalesce(e.writer, ''), e.data, e.metadata, e.hash
			FROM (SELECT) AS one LEFT JOIN LATERAL (
				SELECT ` + columns + ` FROM ` + events + `
				WHERE position >= $1 AND position < $2
				AND (cardinality($3::text[]) = 0 OR EXISTS (SELECT 1 FROM unnest($3::text[]) AS p(prefix) WHERE starts_with(stream, p.prefix)))
				AND (cardinality($4::text[]) = 0 OR type = ANY($4::text[]))
				ORDER BY position LIMIT $5) AS e ON true`, // in position order: page checks
	}
}

// streamHead is the SQL for the last version of the stream named by the
// expression stream (NULL if it has none): of its events in the live log,
// or else the one a trim kept.
func streamHead(events, streams, start, stream string) string {
	return streamHeadBelow(events, streams, start, stream, "")
}

// streamHeadBelow is streamHead with a further condition on e.position
// (below: "" or " AND e.position < N", which lets the planner leave out the
// partitions from N on; see directInto.below).
func streamHeadBelow(events, streams, start, stream, below string) string {
	return `coalesce((SELECT max(e.version) FROM ` + events + ` e WHERE e.stream = ` + stream + ` AND e.position + 0 >= ` + start + below + `),
		(SELECT s.trimmed_last FROM ` + streams + ` s WHERE s.stream = ` + stream + `))`
}

// scanEvent reads one row of columns.
func scanEvent(row pgx.Row) (domain.Envelope, error) {
	var e domain.Envelope
	var pos, version int64
	var h []byte
	err := row.Scan(&pos, &e.Stream, &version, (*[16]byte)(&e.ID), &e.Type, &e.SchemaVersion, &e.Time,
		(*string)(&e.Owner), &e.CorrelationID, &e.CausationID, &e.Writer, (*[]byte)(&e.Data), (*[]byte)(&e.Metadata), &h)
	e.Position, e.Version, e.Time = uint64(pos), uint64(version), e.Time.UTC()
	copy(e.Hash[:], h)
	return e, err
}

// collectEvents reads every row of rows.
func collectEvents(rows pgx.Rows) ([]domain.Envelope, error) {
	out := []domain.Envelope{}
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// isClosed reports whether Close has been called.
func (s *Store) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// clamp turns a position or version into a bigint parameter: anything past
// the largest bigint is past every row.
func clamp(v uint64) int64 {
	return int64(min(v, math.MaxInt64))
}

// ReadStream implements eventstore.Store. A limit of zero or less reads nothing.
func (s *Store) ReadStream(ctx context.Context, stream string, from uint64, limit int) (_ []domain.Envelope, err error) {
	defer markUnavailable(&err)
	if s.isClosed() {
		return nil, eventstore.ErrClosed
	}
	if err := eventstore.ValidateStream(stream); err != nil {
		return nil, err
	}
	var evs []domain.Envelope
	if limit > 0 {
		rows, err := s.pool.Query(ctx, s.sql.readStream, describe, stream, clamp(from), limit)
		if err == nil {
			evs, err = collectEvents(rows)
		}
		if err != nil {
			return nil, fmt.Errorf("postgres: read stream %q: %w", stream, err)
		}
		if len(evs) > 0 {
			return evs, nil
		}
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, s.sql.streamExists, describe, stream).Scan(&exists); err != nil {
		return nil, fmt.Errorf("postgres: read stream %q: %w", stream, err)
	}
	if !exists {
		return nil, fmt.Errorf("read %q: %w", stream, eventstore.ErrStreamNotFound)
	}
	return []domain.Envelope{}, nil
}

// ReadAll implements eventstore.Store. A limit of zero or less reads nothing.
// Every event it returns was committed, and so was every event before it.
// From a position below the live log's start (see Trim) it fails with an
// *eventstore.TrimmedError.
func (s *Store) ReadAll(ctx context.Context, from uint64, limit int) (_ []domain.Envelope, err error) {
	defer markUnavailable(&err)
	if s.isClosed() {
		return nil, eventstore.ErrClosed
	}
	if limit <= 0 {
		return []domain.Envelope{}, ctx.Err()
	}
	rows, err := s.pool.Query(ctx, s.sql.readAll, describe, clamp(from), limit)
	var evs []domain.Envelope
	if err == nil {
		evs, err = collectEvents(rows)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: read all from %d: %w", from, err)
	}
	if len(evs) == 0 {
		if err := s.checkLive(ctx, from); err != nil {
			return nil, err
		}
	}
	return evs, nil
}

// Head implements eventstore.Store: the number of events in the log.
func (s *Store) Head(ctx context.Context) (_ uint64, err error) {
	defer markUnavailable(&err)
	if s.isClosed() {
		return 0, eventstore.ErrClosed
	}
	return s.head(ctx)
}

func (s *Store) head(ctx context.Context) (uint64, error) {
	var next int64
	if err := s.pool.QueryRow(ctx, s.sql.head).Scan(&next); err != nil {
		return 0, fmt.Errorf("postgres: head: %w", err)
	}
	return uint64(next), nil
}

// Close implements eventstore.Store. Appends already accepted are committed
// first; later calls fail with ErrClosed and running subscriptions return
// ErrClosed. A pool given to Open stays open. Closing twice is harmless.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		close(s.closed)
		s.mu.Unlock()
		s.cancel()
		s.wg.Wait()
		if s.ownPool {
			s.pool.Close()
		}
	})
	return nil
}

// versionKey reports whether a unique constraint named name guards stream
// versions: a partition's UNIQUE (stream, version), or the primary key of
// streams (a stream's first event).
func versionKey(name string) bool {
	return strings.HasSuffix(name, "_stream_version_key") || name == "streams_pkey"
}

// idKey reports whether a unique constraint named name is a partition's
// UNIQUE (id).
func idKey(name string) bool { return strings.HasSuffix(name, "_id_key") }

// uniqueViolation returns err's PostgreSQL error if it is SQLSTATE 23505.
func uniqueViolation(err error) (*pgconn.PgError, bool) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return pgErr, true
	}
	return nil, false
}

// textOK reports whether s can be stored in a PostgreSQL text column: valid
// UTF-8 without NUL bytes.
func textOK(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
