// Package postgres is turnstile's PostgreSQL event store: the log in one
// table of a schema (Options.Schema, default "turnstile"), read and written
// with pgx. It implements eventstore.Store, and any number of Stores, in any
// number of processes, may share one schema.
//
// # Opening
//
// OpenURL takes postgres://user:password@host:port/database?… (or
// postgresql://); Open takes a *pgxpool.Pool. Neither changes the database:
// the schema is created and upgraded only by Migrate (MigrateURL), which is
// what `turnstile migrate` runs. Open fails with ErrSchemaNotReady, saying to
// run turnstile migrate, if the schema is missing or behind this build, and
// with ErrSchemaTooNew if a newer build migrated it. Besides the pool, a
// Store keeps up to three connections of its own: one per committer (opened
// on the first append) and one that LISTENs (opened on the first Subscribe).
//
// # Guarantees
//
//   - Durable: Append returns once PostgreSQL has committed the events (with
//     the server's synchronous_commit = on, the default, that is once the
//     commit is flushed to its WAL). Open refuses a database where fsync or
//     synchronous_commit is off (ErrNotDurable), unless
//     Options.AllowNotDurable.
//   - Positions are dense and in commit order: the n-th event ever committed
//     has position n-1, Head is the number of events, and at every moment
//     the committed events are exactly positions 0 to Head-1. A reader
//     therefore never skips an event that a slower transaction commits
//     later: no such transaction exists (see "Why positions are serialised").
//   - AppendMulti is atomic and its events are contiguous. Expected versions
//     are checked, and re-appends recognised, in the transaction that
//     writes, under the log_head lock; UNIQUE (stream, version) and UNIQUE
//     (id) hold even against writers that bypass the store, and a violation
//     (SQLSTATE 23505) becomes eventstore.WrongVersionError (or
//     ErrIdempotencyConflict for an id) after the store has decided the
//     append again under the lock (twice if its first attempt left the
//     head it assumed to the constraint; see below). The constraints hold
//     per partition; see "Partitions and trimming" for the rest.
//   - Group commit: concurrent appends of one Store are queued and written
//     together, in queue order, in one transaction of at most
//     Options.MaxBatch events, by one of two committer goroutines, each
//     with a connection of its own: while one group commits, the next one
//     is decided, sent, and waits for the log_head lock. Each append is
//     decided as if it were alone: one whose expected version fails gets
//     its WrongVersionError and the others commit.
//   - Time is the server's statement_timestamp() of the insert, taken under
//     the lock: one value per transaction, never decreasing along positions
//     unless the server's clock steps back. Stored with microseconds, in UTC.
//   - Subscribe reads committed pages of at most 512 events with the filter
//     applied in the query (the head and the page in one statement), and
//     waits for the NOTIFY every appending transaction sends on the channel
//     "<schema>.log" (payload: the new Head); polling every
//     Options.PollInterval is only the fallback for a lost notification or
//     a broken listening connection, which it reopens. The events the
//     Store's own appends committed lately (up to 16,384) it takes from
//     memory instead: exactly the rows committed, with the positions and
//     commit time the database gave them, published only once the commit
//     succeeded, in one run of consecutive positions; a subscription reads
//     the database for anything outside that run.
//
// # Why positions are serialised
//
// A bigserial or sequence hands out numbers when a transaction inserts, not
// when it commits: transaction A takes 7, B takes 8 and commits first, a
// reader sees 8 and moves its checkpoint past 7, then A commits 7, which that
// reader never sees. There are two ways out. Readers can stay behind every
// transaction still in flight (order by transaction id and hold back to
// pg_snapshot_xmin, as watermill-sql does); writers then run in parallel, but
// positions have holes, every reader must track snapshots, and one slow
// transaction holds back every subscription anyway. Or the writers take
// positions in commit order, which is what this store does: every appending
// transaction first locks the single row of log_head (SELECT … FOR UPDATE),
// takes its positions from log_head.next and advances it in the same
// transaction. The next transaction gets the lock only after this one has
// committed, and PostgreSQL makes a transaction visible before it releases
// its locks, so commit order is position order and what is visible is always
// a prefix of the log. Readers need nothing but the primary key, positions
// are dense, and a checkpoint is one number. The price is one appending
// transaction at a time per schema, across all processes; group commit makes
// each one carry many appends, so the lock is held for one statement (the
// checks and the insert) plus the WAL flush per group, not per append, and
// the next group already waits at the lock (BENCHMARKS.md has figures).
//
// An append is one round trip when the Store can assume the heads of the
// streams it writes: the caller's expected version (Exact, NoStream), the
// head the group before it will leave, or, for Any and StreamExists, the
// head its own last commit left. The committer decides the group on those
// heads and sends, in one pipeline, the lock request, a flush request (its
// answer tells the committer that the group holds the lock, so the next
// group may be sent), and one statement that checks the assumed heads
// against the table, inserts the rows at positions counted from
// log_head.next, advances log_head and notifies, then Sync, which commits.
// Heads known to be in the log are left to the unique constraints instead
// of a look-up: a stream's first event (the primary key of streams refuses
// it if the stream has events), and the head this Store's own last commit
// to the stream left, if that commit's event lies in the live log and in
// the partition the group writes to (if such a stream moved on, the
// version the group writes is taken there). If a checked head is wrong the statement writes nothing, and if a
// row breaks a UNIQUE constraint the insert fails; either way the group
// is decided again the careful way, in two round trips: BEGIN and the lock
// request, with the reads its decisions need (the streams' last versions,
// stored events with its ids) queued behind it in one pipeline; then the
// insert, the log_head update, pg_notify and COMMIT in another. The check
// runs in a statement after the lock request, so its snapshot sees every
// transaction that held the lock before. The committers' connections plan
// with seq scans and JIT off (see Plans in store.go).
//
// # The hash chain
//
// Every event's Hash (eventstore.NextHash of the hash before it and the
// event) is stored in events.hash and filled by every read path, the
// in-memory feed included; KeepsChain is true. The appending statement
// computes it, in SQL, while it holds the log_head lock: log_head.hash is
// the hash of the event at next - 1, so a group chains from it without
// reading the events table and advances it with next, and any number of
// Stores on one schema chain correctly. The committer encodes the part of
// each event it knows (schema version, strings, payload); the statement
// adds position, version, id and time and hashes the group in one call of
// chain_run (migration 4; the careful path uses the chain aggregate of
// migration 2). The result is eventstore.Chainer's, which the
// conformance suite checks on every read. Migration 2 gives an existing log
// its hashes once, in position order (chain_event encodes a stored row), in
// its transaction.
//
// # Partitions and trimming
//
// events is partitioned by position range (migration 3), each partition of
// log_head.partition_size positions (DefaultPartitionSize; SetPartitionSize
// changes it for the partitions made from then on), listed in
// log_partitions. The committers create the next partition ahead, once the
// head has passed half of the last one, as a table of its own that they
// then attach (which takes no lock that appends or reads wait for), and
// then drop its range CHECK (which only spares ATTACH a scan; migration 5).
// An existing unpartitioned table becomes the first partition as it is.
// The one-round-trip append inserts straight into the partition that holds
// the head, with look-ups bounded by that partition's end, when the group
// lies well inside it: the statement checks that under the lock and writes
// nothing otherwise (the group is then decided the careful way, its rows
// routed through events); near a bound it routes them (direct.go).
//
// PostgreSQL keeps UNIQUE (stream, version) and UNIQUE (id) per partition
// only, so the store keeps the rest itself: a stream's first event enters
// the streams table, whose primary key refuses a second version 0 anywhere
// in the live log; a head the append statement leaves to UNIQUE (stream,
// version) is one whose last event lies in the partition the group writes
// to (otherwise it is looked up); the ids of an append with Any or
// StreamExists are looked for in the older live partitions. What is left
// to the caller: an event id stored in an older partition and re-appended
// to another place with Exact or NoStream is stored again instead of being
// refused with ErrIdempotencyConflict (a true re-append, same stream and
// versions, is recognised as before). A look-up of a stream's head or of an
// event id searches the index of every live partition: keep the partitions
// in the live log to tens, not thousands (a trim drops them; see
// docs/trim.md).
//
// Trim (eventstore.Trimmer) runs in two steps. One transaction, under the
// log_head lock, records the new start and the chain hash before it in
// log_head and each kept stream's last version below the start in
// streams.trimmed_last; from its commit on, reads and look-ups leave out
// what lies below the start, ReadAll and Subscribe from below it fail with
// *eventstore.TrimmedError, appends to a kept stream continue its version,
// and ReadStream of a kept stream gives its live events only. Then the rows
// below the start in the partition that holds it are deleted, the
// partitions wholly below it are detached and dropped (their space goes
// back to the file system at once), and the trimmed streams not kept leave
// streams (they may be created again, and the ids of trimmed events are
// forgotten). A process killed between the two steps leaves
// log_head.dropped_below behind the start: the next Trim, or the next Open
// of a Store on the schema, finishes the second step.
//
// # Schema
//
// Migration 1 (migrations/0001_log.sql) creates, in the store's schema,
// events and log_head; migration 2 adds the chain, migration 3 the
// partitions, migration 4 the function that hashes a group in one call,
// migration 5 drops the partitions' range CHECKs. The result:
//
//	events (                                         -- PARTITION BY RANGE (position)
//	    position       bigint      PRIMARY KEY,      -- 0-based, dense, commit order
//	    stream         text COLLATE "C" NOT NULL,    -- UNIQUE (stream, version) per partition
//	    version        bigint      NOT NULL,         -- 0-based within the stream
//	    id             uuid        NOT NULL,         -- UNIQUE per partition
//	    type           text COLLATE "C" NOT NULL,
//	    schema_version bigint      NOT NULL,
//	    committed_at   timestamptz NOT NULL,
//	    owner          text        NOT NULL,         -- api, executor or worker
//	    correlation_id text        NOT NULL,         -- '' when unset, as are
//	    causation_id   text        NOT NULL,         -- these two
//	    writer         text        NOT NULL,
//	    data           bytea,                        -- the JSON bytes as written
//	    metadata       bytea,
//	    hash           bytea       NOT NULL          -- the chain, 32 bytes
//	)
//	events_<lo>    -- its partitions, [lo, hi) each
//	log_head (only_row boolean PRIMARY KEY CHECK (only_row), next bigint NOT NULL,
//	          hash bytea, start bigint, start_hash bytea, partition_size bigint, dropped_below bigint)
//	log_partitions (lo bigint PRIMARY KEY, hi bigint, name text)
//	streams (stream text PRIMARY KEY, first_position bigint, trimmed_last bigint)
//
// and the functions chain_event, chain_step, chain (an aggregate),
// add_partitions and chain_run (migration 4). Migrate adds schema_migrations (version, name,
// applied_at). Data and metadata are bytea so that they round-trip byte for
// byte; query them with convert_from(data, 'UTF8')::jsonb. Type,
// CorrelationID, CausationID and Writer are text, so they must be valid
// UTF-8 without NUL bytes (appends that break this get
// eventstore.ErrInvalidEvent).
//
// Anything else that writes to events must take the log_head lock the same
// way, advance next and hash in the same transaction, and insert a
// stream's first event into streams, or it breaks the promises above.
// Reading needs no lock.
//
// Reads are planned for their parameters each time, and the lookups of an
// append with seq scans disabled: a cached generic plan made while the table
// was small would otherwise scan it sequentially until autovacuum next
// analyzes it.
//
// # Failures
//
// If a transaction fails on the way (a broken connection, a server restart,
// Options.CommitTimeout), every append in it gets the error and may or may
// not have been committed; re-appending the same event ids is the safe
// retry. A failing read ends Subscribe with its error.
package postgres
