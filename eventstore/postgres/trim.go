package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// A trim (eventstore.Trimmer) in two steps.
//
//  1. One transaction, holding the log_head lock as an append does: it
//     records the new start and the chain hash before it in log_head, and
//     the last version below the start of each kept stream in
//     streams.trimmed_last (and clears it for the streams no longer kept).
//     From its commit on, reads and look-ups leave out what lies below the
//     start, and appends to a kept stream continue its version.
//  2. Then, with no lock that appends wait for but a moment's: rows below
//     the start in the partition that holds it are deleted, the partitions
//     wholly below it are detached and dropped (their space goes back to
//     the file system at once), the streams forgotten (not kept, no event
//     left) leave the streams table, and log_head.dropped_below records
//     that step 2 is done up to the start.
//
// Step 2 is idempotent: a process killed after step 1 leaves
// dropped_below behind start, and the next Trim or Open of any Store on the
// schema finishes it. Until then the rows below the start are invisible but
// still take space, and a forgotten stream cannot be created again.

var _ eventstore.Trimmer = (*Store)(nil)

// trimLockTimeout bounds how long detaching a partition waits for the
// statements reading or writing events (appends queue behind it meanwhile).
const trimLockTimeout = "5s"

// Trim implements eventstore.Trimmer.
func (s *Store) Trim(ctx context.Context, before uint64, keep []string) (err error) {
	defer markUnavailable(&err)
	if s.isClosed() {
		return eventstore.ErrClosed
	}
	for _, st := range keep {
		if err := eventstore.ValidateStream(st); err != nil {
			return fmt.Errorf("postgres: trim: kept stream: %w", err)
		}
	}
	if err := s.recordTrim(ctx, before, keep); err != nil {
		return fmt.Errorf("postgres: trim: %w", err)
	}
	s.heads.forget() // cached heads may lie below the start now
	return s.finishTrim(ctx)
}

// recordTrim is step 1 of a trim.
func (s *Store) recordTrim(ctx context.Context, before uint64, keep []string) error {
	if keep == nil {
		keep = []string{}
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var next, start int64
		if err := tx.QueryRow(ctx, `SELECT next, start FROM `+s.sql.headTable+` FOR UPDATE`).Scan(&next, &start); err != nil {
			return err
		}
		if before > uint64(next) {
			return fmt.Errorf("trim before position %d: the log's head is %d", before, next)
		}
		if before <= uint64(start) {
			return nil // done before: nothing to record
		}
		var prev []byte
		if err := tx.QueryRow(ctx, `SELECT CASE WHEN $1::bigint = next THEN hash
				ELSE (SELECT hash FROM `+s.sql.eventsTable+` WHERE position = $1::bigint - 1) END FROM `+s.sql.headTable,
			int64(before)).Scan(&prev); err != nil {
			return fmt.Errorf("reading the hash before position %d: %w", before, err)
		}
		if len(prev) != len(domain.Hash{}) {
			return fmt.Errorf("no event at position %d to chain the live log's start from", before-1)
		}
		if _, err := tx.Exec(ctx, `UPDATE `+s.sql.streamsTable+` s SET trimmed_last = CASE WHEN s.stream = ANY($1::text[])
				THEN coalesce((SELECT max(e.version) FROM `+s.sql.eventsTable+` e
					WHERE e.stream = s.stream AND e.position >= $2::bigint AND e.position < $3::bigint), s.trimmed_last) END
			WHERE s.stream = ANY($1::text[]) OR s.trimmed_last IS NOT NULL`, keep, start, int64(before)); err != nil {
			return fmt.Errorf("recording the kept streams' heads: %w", err)
		}
		_, err := tx.Exec(ctx, `UPDATE `+s.sql.headTable+` SET start = $1, start_hash = $2`, int64(before), prev)
		return err
	})
}

// Start implements eventstore.Trimmer.
func (s *Store) Start(ctx context.Context) (_ uint64, _ domain.Hash, err error) {
	defer markUnavailable(&err)
	if s.isClosed() {
		return 0, domain.Hash{}, eventstore.ErrClosed
	}
	var start int64
	var prev []byte
	if err := s.pool.QueryRow(ctx, s.sql.start).Scan(&start, &prev); err != nil {
		return 0, domain.Hash{}, fmt.Errorf("postgres: start: %w", err)
	}
	return uint64(start), domain.Hash(prev), nil
}

// checkLive fails with an *eventstore.TrimmedError if from lies below the
// live log's start.
func (s *Store) checkLive(ctx context.Context, from uint64) error {
	var start, next int64
	if err := s.pool.QueryRow(ctx, `SELECT start, next FROM `+s.sql.headTable).Scan(&start, &next); err != nil {
		return fmt.Errorf("postgres: reading the live log's start: %w", err)
	}
	if from < uint64(start) {
		return &eventstore.TrimmedError{From: from, First: uint64(start)}
	}
	return nil
}

// finishTrim runs step 2 of a trim up to the live log's start, if a trim
// left it undone. Concurrent callers take turns (an advisory lock).
func (s *Store) finishTrim(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: finishing a trim: %w", err)
	}
	defer conn.Release()
	lock := pgx.Identifier{s.opts.Schema}.Sanitize() + ".trim"
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext($1))`, lock); err != nil {
		return fmt.Errorf("postgres: finishing a trim: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext($1))`, lock)
	}()
	var start, done int64
	if err := conn.QueryRow(ctx, `SELECT start, dropped_below FROM `+s.sql.headTable).Scan(&start, &done); err != nil {
		return fmt.Errorf("postgres: finishing a trim: %w", err)
	}
	if done >= start {
		return nil
	}
	if err := s.dropBelow(ctx, conn.Conn(), start); err != nil {
		return fmt.Errorf("postgres: finishing the trim to position %d: %w", start, err)
	}
	return nil
}

// dropBelow is step 2 of a trim to start, on conn (which holds the trim
// lock): each part in a transaction of its own.
func (s *Store) dropBelow(ctx context.Context, conn *pgx.Conn, start int64) error {
	rows, err := conn.Query(ctx, `SELECT lo, hi, name FROM `+s.sql.partitions+` WHERE lo < $1 ORDER BY lo`, start)
	if err != nil {
		return err
	}
	type part struct {
		lo, hi int64
		name   string
	}
	var parts []part
	for rows.Next() {
		var p part
		if err := rows.Scan(&p.lo, &p.hi, &p.name); err != nil {
			rows.Close()
			return err
		}
		parts = append(parts, p)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, p := range parts {
		table := pgx.Identifier{s.opts.Schema, p.name}.Sanitize()
		if p.hi > start { // holds the start: its rows below go, the rest stays
			if _, err := conn.Exec(ctx, `DELETE FROM `+table+` WHERE position < $1`, start); err != nil {
				return fmt.Errorf("deleting the rows of %s below %d: %w", p.name, start, err)
			}
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for _, q := range []string{
				`SET LOCAL lock_timeout = '` + trimLockTimeout + `'`,
				`ALTER TABLE ` + s.sql.eventsTable + ` DETACH PARTITION ` + table,
				`DROP TABLE ` + table,
			} {
				if _, err := tx.Exec(ctx, q); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, `DELETE FROM `+s.sql.partitions+` WHERE lo = $1`, p.lo)
			return err
		})
		if err != nil {
			return fmt.Errorf("dropping partition %s: %w", p.name, err)
		}
	}
	if _, err := conn.Exec(ctx, `DELETE FROM `+s.sql.streamsTable+` s
		WHERE s.trimmed_last IS NULL AND s.first_position < $1
		AND NOT EXISTS (SELECT 1 FROM `+s.sql.eventsTable+` e WHERE e.stream = s.stream AND e.position >= $1)`, start); err != nil {
		return fmt.Errorf("forgetting the trimmed streams: %w", err)
	}
	_, err = conn.Exec(ctx, `UPDATE `+s.sql.headTable+` SET dropped_below = $1 WHERE dropped_below < $1`, start)
	return err
}
