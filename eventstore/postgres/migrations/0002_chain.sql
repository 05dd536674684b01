-- The hash chain (docs/log-over-months.md): every event's hash is SHA-256
-- over the hash of the event before it and the event's canonical encoding
-- (eventstore/chain.go). The appending statements compute it in SQL, under
-- the log_head lock, from log_head.hash; this migration gives an existing log
-- its hashes once, in position order.
-- Runs with search_path set to the store's schema (see Migrate).

-- chain_event is an event's canonical encoding without the domain and the
-- previous hash: position, version, id, time (microseconds since the Unix
-- epoch), schema version (8 bytes each but the id's 16, big-endian), then
-- the strings and the payload, each as its length in bytes (4 bytes) and its
-- bytes (strings in UTF-8; NULL and empty payloads alike). It calls nothing
-- of this schema, so it works whatever the caller's search_path.
CREATE FUNCTION chain_event(pos bigint, ver bigint, eid uuid, at timestamptz, sv bigint,
        stream text, type text, owner text, correlation_id text, causation_id text, writer text,
        data bytea, metadata bytea) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT int8send(pos) || int8send(ver) || uuid_send(eid)
        || int8send((extract(epoch FROM at) * 1000000)::bigint) || int8send(sv)
        || int4send(octet_length(convert_to(stream, 'UTF8'))) || convert_to(stream, 'UTF8')
        || int4send(octet_length(convert_to(type, 'UTF8'))) || convert_to(type, 'UTF8')
        || int4send(octet_length(convert_to(owner, 'UTF8'))) || convert_to(owner, 'UTF8')
        || int4send(octet_length(convert_to(correlation_id, 'UTF8'))) || convert_to(correlation_id, 'UTF8')
        || int4send(octet_length(convert_to(causation_id, 'UTF8'))) || convert_to(causation_id, 'UTF8')
        || int4send(octet_length(convert_to(writer, 'UTF8'))) || convert_to(writer, 'UTF8')
        || int4send(coalesce(octet_length(data), 0)) || coalesce(data, '\x'::bytea)
        || int4send(coalesce(octet_length(metadata), 0)) || coalesce(metadata, '\x'::bytea) $$;

-- chain_step is one link: the hash of an event (enc, from chain_event) after
-- the hash state, or after prev for the first event of a run. In PL/pgSQL,
-- whose compiled expression a session keeps: a SQL function here would be
-- planned again by every statement that chains.
CREATE FUNCTION chain_step(state bytea, prev bytea, enc bytea) RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$ BEGIN RETURN sha256('\x7475726e7374696c652d636861696e2d31'::bytea || coalesce(state, prev) || enc); END $$;

-- chain(prev, enc) OVER (ORDER BY position) is the hash of each event of a
-- run of consecutive events after prev, the hash of the event before them.
CREATE AGGREGATE chain(bytea, bytea) (SFUNC = chain_step, STYPE = bytea);

ALTER TABLE events ADD COLUMN hash bytea;

UPDATE events e SET hash = c.hash
FROM (
    SELECT position, chain('\x0000000000000000000000000000000000000000000000000000000000000000'::bytea,
        chain_event(position, version, id, committed_at, schema_version, stream, type, owner,
            correlation_id, causation_id, writer, data, metadata)) OVER (ORDER BY position) AS hash
    FROM events
) c
WHERE e.position = c.position;

ALTER TABLE events ALTER COLUMN hash SET NOT NULL,
    ADD CONSTRAINT events_hash_check CHECK (octet_length(hash) = 32);

COMMENT ON COLUMN events.hash IS
    'the hash chain: SHA-256 over the previous event''s hash and this event''s canonical encoding (turnstile verify checks it)';

-- log_head.hash is the hash of the event at next - 1 (zeros for an empty
-- log): appending transactions chain from it under the lock.
ALTER TABLE log_head ADD COLUMN hash bytea NOT NULL
    DEFAULT '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea
    CONSTRAINT log_head_hash_check CHECK (octet_length(hash) = 32);

UPDATE log_head SET hash = coalesce(
    (SELECT hash FROM events WHERE position = log_head.next - 1), log_head.hash);
