-- The log: one row per event, and the one-row table that assigns positions.
-- Runs with search_path set to the store's schema (see Migrate).

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
    CONSTRAINT events_pkey PRIMARY KEY (position),
    CONSTRAINT events_stream_version_key UNIQUE (stream, version),
    CONSTRAINT events_id_key UNIQUE (id),
    CONSTRAINT events_position_check CHECK (position >= 0),
    CONSTRAINT events_version_check CHECK (version >= 0),
    CONSTRAINT events_owner_check CHECK (owner IN ('api', 'executor', 'worker'))
);

COMMENT ON TABLE events IS
    'turnstile''s log. Append only: rows are inserted by the postgres event store, under a lock on log_head, never updated or deleted.';
COMMENT ON COLUMN events.position IS 'global position: dense, 0-based, in commit order';
COMMENT ON COLUMN events.version IS '0-based version within the stream';
COMMENT ON COLUMN events.data IS 'the event''s JSON payload, byte for byte as written (convert_from(data, ''UTF8'')::jsonb to query it)';

-- log_head.next is the position the next event gets, which is also the number
-- of events. Appending transactions lock this row first and update it in the
-- same transaction as their inserts, so positions are assigned in commit order.
CREATE TABLE log_head (
    only_row boolean NOT NULL DEFAULT true,
    next     bigint  NOT NULL,
    CONSTRAINT log_head_pkey PRIMARY KEY (only_row),
    CONSTRAINT log_head_only_row_check CHECK (only_row),
    CONSTRAINT log_head_next_check CHECK (next >= 0)
);

INSERT INTO log_head (next) VALUES (0);
