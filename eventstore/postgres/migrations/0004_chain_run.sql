-- chain_run hashes a whole group of new events in one call: the appending
-- statement's chain costs PostgreSQL about half the CPU it did as the window
-- aggregate chain (migration 2), which called a PL/pgSQL step per event (each
-- call sets up a function context) and made the statement carry every row
-- through a materialised window (BENCHMARKS.md, "The hash chain and the
-- partitions"). The hashes are the same.
-- Runs with search_path set to the store's schema (see Migrate).

-- chain_run(prev, first, at, versions, ids, tails) is the hash of each event
-- of a run of consecutive events after prev, the hash of the event before
-- them: the i-th (1-based) is at position first + i - 1 with version
-- versions[i], id ids[i], time at (microseconds since the Unix epoch, 8 bytes
-- big-endian) and tails[i], the rest of its canonical encoding (schema
-- version, strings and payload: eventstore/postgres chainTail). One hash per
-- element of tails, in order; the three arrays have the same length. It calls
-- nothing of this schema, so it works whatever the caller's search_path.
CREATE FUNCTION chain_run(prev bytea, first bigint, at bytea, versions bigint[], ids uuid[], tails bytea[]) RETURNS bytea[]
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
DECLARE
    h   bytea := prev;
    t   bytea;
    i   integer := 0;
    out bytea[] := '{}';
BEGIN
    IF tails IS NULL THEN
        RETURN out;
    END IF;
    FOREACH t IN ARRAY tails LOOP -- FOREACH walks a flat array once; tails[i] would walk it from the start
        i := i + 1;
        h := sha256('\x7475726e7374696c652d636861696e2d31'::bytea || h
            || int8send(first + i - 1) || int8send(versions[i]) || uuid_send(ids[i]) || at || t);
        out[i] := h;
    END LOOP;
    RETURN out;
END
$$;
