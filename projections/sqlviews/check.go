package sqlviews

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/turnstile/turnstile/eventstore"
)

// Checkpoint returns the committed checkpoint of the tables in opts.Schema
// (0 if no projector has committed yet): they are the fold of the log
// positions below it.
func Checkpoint(ctx context.Context, pool *pgxpool.Pool, opts Options) (uint64, error) {
	if err := opts.Validate(); err != nil {
		return 0, err
	}
	opts = opts.withDefaults()
	return checkpoint(ctx, pool, opts)
}

func checkpoint(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, opts Options) (uint64, error) {
	var next int64
	err := q.QueryRow(ctx, newStatements(opts.Schema, opts.Name).loadCheckpoint, opts.Name).Scan(&next, new(string))
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sqlviews: reading the checkpoint: %w", err)
	}
	return uint64(next), nil
}

// WaitFor waits until the checkpoint of the tables in opts.Schema reaches
// target (for example the store's head once writers have stopped), polling
// every 20ms, or until ctx ends.
func WaitFor(ctx context.Context, pool *pgxpool.Pool, opts Options, target uint64) error {
	for {
		cp, err := Checkpoint(ctx, pool, opts)
		if err != nil {
			return err
		}
		if cp >= target {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sqlviews: waiting for checkpoint %d (at %d): %w", target, cp, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Reset empties the tables and sets their checkpoint to 0 in one
// transaction, so the projector folds the log again from position 0. A
// projector running at the time fails its next transaction with ErrFenced
// and, run again, starts over.
func Reset(ctx context.Context, pool *pgxpool.Pool, opts Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	opts = opts.withDefaults()
	if err := checkSchema(ctx, pool, opts.Schema); err != nil {
		return err
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	id := func(t string) string { return pgx.Identifier{opts.Schema, t}.Sanitize() }
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "TRUNCATE "+id("executions")+", "+id("queue_stats")); err != nil {
			return fmt.Errorf("sqlviews: reset: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+id("projection_checkpoints")+` (name, next, writer) VALUES ($1, 0, $2)
			ON CONFLICT (name) DO UPDATE SET next = 0, writer = EXCLUDED.writer, updated_at = now()`,
			opts.Name, "reset/"+hex.EncodeToString(b)); err != nil {
			return fmt.Errorf("sqlviews: reset: %w", err)
		}
		return nil
	})
}

// Report is the result of Check.
type Report struct {
	Position    uint64   `json:"position"`    // the live checkpoint both sides are at
	Executions  int      `json:"executions"`  // rows in the live executions table
	QueueStats  int      `json:"queue_stats"` // rows in the live queue_stats table
	Differences []string `json:"differences"` // one line each, at most the max given to Check
	// RebuildSeconds is how long the rebuild into the scratch schema took
	// (folding and writing every row).
	RebuildSeconds float64 `json:"rebuild_seconds"`
}

// Equal reports whether the live tables equal the rebuild.
func (r Report) Equal() bool { return len(r.Differences) == 0 }

// Check rebuilds the tables from position 0 of store into a scratch schema
// (dropped afterwards), up to the live tables' committed checkpoint, and
// compares every row with the live tables (as of one snapshot, so a
// projector may keep running): equal rows are equal as PostgreSQL values
// (jsonb semantically, timestamps to the microsecond). It lists at most max
// differences. The live tables are only read.
func Check(ctx context.Context, pool *pgxpool.Pool, store eventstore.Store, opts Options, max int) (Report, error) {
	if err := opts.Validate(); err != nil {
		return Report{}, err
	}
	opts = opts.withDefaults()
	if max <= 0 {
		max = 20
	}
	if err := checkSchema(ctx, pool, opts.Schema); err != nil {
		return Report{}, err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	scratch := fmt.Sprintf("%.40s_check_%s", opts.Schema, hex.EncodeToString(b))
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = pool.Exec(dctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{scratch}.Sanitize()+" CASCADE")
	}()
	if _, err := Migrate(ctx, pool, scratch); err != nil {
		return Report{}, err
	}
	live := func(t string) string { return pgx.Identifier{opts.Schema, t}.Sanitize() }
	copyOf := func(t string) string { return pgx.Identifier{scratch, "live_" + t}.Sanitize() }
	rebuilt := func(t string) string { return pgx.Identifier{scratch, t}.Sanitize() }

	// One snapshot of the live tables and their checkpoint.
	var rep Report
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		var err error
		if rep.Position, err = checkpoint(ctx, tx, opts); err != nil {
			return err
		}
		for _, t := range []string{"executions", "queue_stats"} {
			tag, err := tx.Exec(ctx, "CREATE TABLE "+copyOf(t)+" AS SELECT * FROM "+live(t))
			if err != nil {
				return fmt.Errorf("sqlviews: check: copying %s: %w", t, err)
			}
			if t == "executions" {
				rep.Executions = int(tag.RowsAffected())
			} else {
				rep.QueueStats = int(tag.RowsAffected())
			}
		}
		return nil
	})
	if err != nil {
		return Report{}, err
	}

	p, err := New(ctx, pool, store, Options{Schema: scratch, Name: opts.Name, MaxBatch: opts.MaxBatch, Logger: opts.Logger})
	if err != nil {
		return Report{}, err
	}
	start := time.Now()
	if err := p.CatchUpTo(ctx, rep.Position); err != nil {
		return Report{}, fmt.Errorf("sqlviews: check: rebuilding up to %d: %w", rep.Position, err)
	}
	rep.RebuildSeconds = time.Since(start).Seconds()

	rep.Differences = []string{}
	for _, t := range []struct{ table, key, label string }{
		{"executions", "id", "execution"}, {"queue_stats", "action", "queue_stats"},
	} {
		rows, err := pool.Query(ctx, `SELECT coalesce(l.`+t.key+`, r.`+t.key+`), to_jsonb(l)::text, to_jsonb(r)::text
			FROM `+copyOf(t.table)+` l FULL JOIN `+rebuilt(t.table)+` r ON l.`+t.key+` = r.`+t.key+`
			WHERE to_jsonb(l) IS DISTINCT FROM to_jsonb(r)
			ORDER BY 1 LIMIT $1`, max-len(rep.Differences))
		if err != nil {
			return Report{}, fmt.Errorf("sqlviews: check: comparing %s: %w", t.table, err)
		}
		for rows.Next() {
			var key string
			var l, r *string
			if err := rows.Scan(&key, &l, &r); err != nil {
				rows.Close()
				return Report{}, err
			}
			switch {
			case l == nil:
				rep.Differences = append(rep.Differences, fmt.Sprintf("%s %s: missing from the live table; rebuilt: %s", t.label, key, clip(*r)))
			case r == nil:
				rep.Differences = append(rep.Differences, fmt.Sprintf("%s %s: in the live table only: %s", t.label, key, clip(*l)))
			default:
				rep.Differences = append(rep.Differences, fmt.Sprintf("%s %s: live %s != rebuilt %s", t.label, key, clip(*l), clip(*r)))
			}
		}
		if err := rows.Err(); err != nil {
			return Report{}, fmt.Errorf("sqlviews: check: comparing %s: %w", t.table, err)
		}
	}
	return rep, nil
}

func clip(s string) string {
	if len(s) > 600 {
		return s[:600] + "…"
	}
	return s
}
