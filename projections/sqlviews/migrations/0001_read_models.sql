-- The read models as tables: executions, queue_stats, and the checkpoint the
-- projector commits in the same transaction as their rows. Runs with
-- search_path set to the read models' schema (see Migrate).

-- One row per projection: the log position it has applied up to (the next
-- position it will read) and which projector process wrote it last.
CREATE TABLE projection_checkpoints (
    name       text        COLLATE "C" NOT NULL,
    next       bigint      NOT NULL,
    writer     text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT projection_checkpoints_pkey PRIMARY KEY (name),
    CONSTRAINT projection_checkpoints_next_check CHECK (next >= 0)
);

COMMENT ON TABLE projection_checkpoints IS
    'turnstile read-model checkpoints: executions and queue_stats are exactly the fold of the log positions below next (committed in one transaction with their rows).';

-- One row per execution the log requested: its current state, as
-- GET /api/v1/executions/{id} shows it.
CREATE TABLE executions (
    id                 text        COLLATE "C" NOT NULL,
    action             text        COLLATE "C" NOT NULL,
    status             text        NOT NULL,
    concurrency_key    text,
    parent             text        COLLATE "C",
    item_index         integer,
    items              integer,
    concurrency        integer,
    children           text[],
    children_requested integer,
    worker             text,
    attempt            integer     NOT NULL,
    cancel_requested   boolean     NOT NULL,
    input              jsonb,
    result             jsonb,
    error              text,
    code               text,
    requested_at       timestamptz,
    scheduling_at      timestamptz,
    scheduled_at       timestamptz,
    running_at         timestamptz,
    ended_at           timestamptz,
    version            bigint      NOT NULL,
    requested_position bigint,
    position           bigint      NOT NULL,
    CONSTRAINT executions_pkey PRIMARY KEY (id)
);

-- Listing an action's executions in request order (newest first: DESC).
CREATE INDEX executions_action_requested ON executions (action, requested_position);
-- The executions that have not ended: few, whatever the history's size.
CREATE INDEX executions_open ON executions (status, action)
    WHERE status IN ('requested', 'scheduling', 'scheduled', 'running');
-- A with_items parent's children.
CREATE INDEX executions_parent ON executions (parent, item_index) WHERE parent IS NOT NULL;

COMMENT ON TABLE executions IS
    'turnstile read model: one row per execution, its state as of the log position in projection_checkpoints (the same fields as the API''s execution resource).';
COMMENT ON COLUMN executions.version IS 'version of the execution''s stream after its last applied event';
COMMENT ON COLUMN executions.requested_position IS 'log position of execution.requested: the FIFO order of the action''s queue';
COMMENT ON COLUMN executions.position IS 'log position of the last event that changed this row';

-- One row per defined action: its queue's statistics, as
-- GET /api/v1/actions/{ref}/queue-stats shows them.
CREATE TABLE queue_stats (
    action             text             COLLATE "C" NOT NULL,
    queue_length       integer          NOT NULL,
    active_count       integer          NOT NULL,
    max_concurrent     integer          NOT NULL,
    paused             boolean          NOT NULL,
    oldest_enqueued_at timestamptz,
    total_enqueued     bigint           NOT NULL,
    total_granted      bigint           NOT NULL,
    total_completed    bigint           NOT NULL,
    total_failed       bigint           NOT NULL,
    total_timed_out    bigint           NOT NULL,
    total_rejected     bigint           NOT NULL,
    total_cancelled    bigint           NOT NULL,
    wait_p50_ms        double precision NOT NULL,
    wait_p95_ms        double precision NOT NULL,
    position           bigint           NOT NULL,
    CONSTRAINT queue_stats_pkey PRIMARY KEY (action)
);

COMMENT ON TABLE queue_stats IS
    'turnstile read model: one row per defined action, its queue statistics as of the log position in projection_checkpoints (the API''s queue_stats resource).';
COMMENT ON COLUMN queue_stats.wait_p50_ms IS 'median wait from request to slot grant over the action''s last 1024 grants, in ms';
COMMENT ON COLUMN queue_stats.position IS 'log position of the last event that changed this row';
