-- A partition's range CHECK (events_<lo>_range) is there so that ATTACH
-- PARTITION need not scan the table to prove its rows fit; once attached,
-- the partition's own bound says the same, and PostgreSQL checks that bound
-- whenever a row is inserted into the partition directly (the one-round-trip
-- append now does: eventstore/postgres direct.go), and needs no check at all
-- for a row it routes through events. Kept, the CHECK was evaluated for
-- every row appended (BENCHMARKS.md, "Winning back the append"). This
-- migration drops it from the partitions there are and makes add_partitions
-- drop it right after each ATTACH.
-- Runs with search_path set to the store's schema (see Migrate).

CREATE OR REPLACE FUNCTION add_partitions(sch text, upto bigint) RETURNS void
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
        EXECUTE format('ALTER TABLE %I.%I DROP CONSTRAINT %I', sch, name, name || '_range');
        EXECUTE format('INSERT INTO %I.log_partitions (lo, hi, name) VALUES (%s, %s, %L)', sch, lo, hi, name);
    END LOOP;
END
$$;

DO $$
DECLARE
    p record;
BEGIN
    FOR p IN SELECT name FROM log_partitions ORDER BY lo LOOP
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT IF EXISTS %I', p.name, p.name || '_range');
    END LOOP;
END
$$;
