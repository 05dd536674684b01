-- The live log gives up its archived prefix (eventstore.Trimmer): events is
-- partitioned by position range, so a trim drops whole partitions and their
-- space goes back to the file system. An existing events table becomes the
-- first partition as it is (no rows are copied: one scan checks its range).
-- Runs with search_path set to the store's schema (see Migrate).

-- log_head.start is the live log's first position, start_hash the chain
-- hash of the event before it (zeros at 0); partition_size the positions of
-- each partition created from now on; dropped_below how far a trim has
-- dropped what lies below the start (behind start: a trim to finish).
ALTER TABLE log_head
    ADD COLUMN start bigint NOT NULL DEFAULT 0 CONSTRAINT log_head_start_check CHECK (start >= 0 AND start <= next),
    ADD COLUMN start_hash bytea NOT NULL
        DEFAULT '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea
        CONSTRAINT log_head_start_hash_check CHECK (octet_length(start_hash) = 32),
    ADD COLUMN partition_size bigint NOT NULL DEFAULT 1000000 CONSTRAINT log_head_partition_size_check CHECK (partition_size > 0),
    ADD COLUMN dropped_below bigint NOT NULL DEFAULT 0;

-- log_partitions lists the partitions of events: [lo, hi) each, contiguous.
CREATE TABLE log_partitions (
    lo   bigint NOT NULL,
    hi   bigint NOT NULL,
    name text   NOT NULL,
    CONSTRAINT log_partitions_pkey PRIMARY KEY (lo),
    CONSTRAINT log_partitions_range_check CHECK (lo >= 0 AND hi > lo)
);

-- streams holds one row per stream of the live log: a stream's first event
-- inserts it, so that its primary key makes a stream's version 0 unique
-- across partitions (UNIQUE (stream, version) and UNIQUE (id) hold per
-- partition only). trimmed_last is the last version below the live log's
-- start of a stream a trim kept (NULL for the others): appends continue it.
-- A trim deletes the rows of the streams it forgot.
CREATE TABLE streams (
    stream         text   COLLATE "C" NOT NULL,
    first_position bigint NOT NULL,
    trimmed_last   bigint,
    CONSTRAINT streams_pkey PRIMARY KEY (stream)
);

CREATE INDEX streams_kept ON streams (stream) WHERE trimmed_last IS NOT NULL;

INSERT INTO streams (stream, first_position)
SELECT stream, min(position) FROM events GROUP BY stream;

-- The old table becomes the partition [0, hi), hi the first multiple of
-- partition_size above its last position.
ALTER TABLE events RENAME TO events_0;
ALTER TABLE events_0 RENAME CONSTRAINT events_pkey TO events_0_pkey;
ALTER TABLE events_0 RENAME CONSTRAINT events_stream_version_key TO events_0_stream_version_key;
ALTER TABLE events_0 RENAME CONSTRAINT events_id_key TO events_0_id_key;

CREATE TABLE events (
    position       bigint      NOT NULL,
    stream         text        COLLATE "C" NOT NULL,
    version        bigint      NOT NULL,
    id             uuid        NOT NULL,
    type           text        COLLATE "C" NOT NULL,
    schema_version bigint      NOT NULL,
    committed_at   timestamptz NOT NULL,
    owner          text        NOT NULL,
    correlation_id text        NOT NULL,
    causation_id   text        NOT NULL,
    writer         text        NOT NULL,
    data           bytea,
    metadata       bytea,
    hash           bytea       NOT NULL,
    CONSTRAINT events_pkey PRIMARY KEY (position),
    CONSTRAINT events_position_check CHECK (position >= 0),
    CONSTRAINT events_version_check CHECK (version >= 0),
    CONSTRAINT events_owner_check CHECK (owner IN ('api', 'executor', 'worker')),
    CONSTRAINT events_hash_check CHECK (octet_length(hash) = 32)
) PARTITION BY RANGE (position);

COMMENT ON TABLE events IS
    'turnstile''s log, partitioned by position range (log_partitions). Append only: rows are inserted by the postgres event store, under a lock on log_head, never updated; a trim drops the partitions below log_head.start.';
COMMENT ON COLUMN events.position IS 'global position: dense, 0-based, in commit order';
COMMENT ON COLUMN events.version IS '0-based version within the stream';
COMMENT ON COLUMN events.data IS 'the event''s JSON payload, byte for byte as written (convert_from(data, ''UTF8'')::jsonb to query it)';
COMMENT ON COLUMN events.hash IS
    'the hash chain: SHA-256 over the previous event''s hash and this event''s canonical encoding (turnstile verify checks it)';

-- add_partitions creates partitions of the schema's events table, each of
-- log_head.partition_size positions after the last one, until one holds
-- position upto. Concurrent callers take turns (an advisory lock); a
-- partition is made as a table of its own and then attached, which does
-- not block readers and writers of events.
CREATE FUNCTION add_partitions(sch text, upto bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    size bigint;
    lo   bigint;
    hi   bigint;
    name text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext(sch || '.events partitions'));
    EXECUTE format('SELECT partition_size FROM %I.log_head', sch) INTO size;
    LOOP
        EXECUTE format('SELECT max(hi) FROM %I.log_partitions', sch) INTO lo;
        lo := coalesce(lo, 0);
        EXIT WHEN lo > upto;
        hi := lo + size;
        name := 'events_' || lo;
        EXECUTE format('CREATE TABLE %I.%I (LIKE %I.events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', sch, name, sch);
        EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I CHECK (position >= %s AND position < %s)', sch, name, name || '_range', lo, hi);
        EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I PRIMARY KEY (position)', sch, name, name || '_pkey');
        EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I UNIQUE (stream, version)', sch, name, name || '_stream_version_key');
        EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I UNIQUE (id)', sch, name, name || '_id_key');
        EXECUTE format('ALTER TABLE %I.events ATTACH PARTITION %I.%I FOR VALUES FROM (%s) TO (%s)', sch, sch, name, lo, hi);
        EXECUTE format('INSERT INTO %I.log_partitions (lo, hi, name) VALUES (%s, %s, %L)', sch, lo, hi, name);
    END LOOP;
END
$$;

DO $$
DECLARE
    size bigint;
    hi   bigint;
BEGIN
    SELECT partition_size, (next / partition_size + 1) * partition_size INTO size, hi FROM log_head;
    EXECUTE format('ALTER TABLE events_0 ADD CONSTRAINT events_0_range CHECK (position >= 0 AND position < %s)', hi);
    EXECUTE format('ALTER TABLE events ATTACH PARTITION events_0 FOR VALUES FROM (0) TO (%s)', hi);
    INSERT INTO log_partitions (lo, hi, name) VALUES (0, hi, 'events_0');
END
$$;

-- One more partition ahead.
SELECT add_partitions(current_schema(), (SELECT hi FROM log_partitions));
