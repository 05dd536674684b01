package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/turnstile/turnstile/projections/sqlviews"
	"github.com/turnstile/turnstile/services/node"
)

// The PostgreSQL read model tables (projections/sqlviews): created by
// migrate, kept by serve, checked and reset by rebuild.

// openSQLViews connects to the database of a postgres:// store URL; the
// tables live in the log's schema.
func openSQLViews(ctx context.Context, storeURL string) (*pgxpool.Pool, sqlviews.Options, error) {
	pool, schema, err := sqlviews.Connect(ctx, storeURL, node.PGSchema())
	if err != nil {
		return nil, sqlviews.Options{}, err
	}
	return pool, sqlviews.Options{Schema: schema}, nil
}

// migrateSQLViews creates or updates the read model tables.
func migrateSQLViews(ctx context.Context, storeURL string, out io.Writer) error {
	pool, opts, err := openSQLViews(ctx, storeURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := sqlviews.Migrate(ctx, pool, opts.Schema)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", node.RedactURL(storeURL), err)
	}
	for _, m := range applied {
		fmt.Fprintf(out, "applied read model migration %d: %s\n", m.Version, m.Name)
	}
	fmt.Fprintf(out, "read model tables at version %d\n", sqlviews.SchemaVersion())
	return nil
}

// rebuildSQLViews checks the tables against a rebuild from position 0 (exit
// 1 on a difference), or, with reset, empties them so that they are folded
// again: here at once if no projector runs, else by the running one.
func rebuildSQLViews(ctx context.Context, storeURL string, reset bool, stdout io.Writer) (int, error) {
	store, _, err := openStore(storeURL, "")
	if err != nil {
		return 3, err
	}
	defer store.Close()
	pool, opts, err := openSQLViews(ctx, storeURL)
	if err != nil {
		return 3, err
	}
	defer pool.Close()
	if reset {
		if err := sqlviews.Reset(ctx, pool, opts); err != nil {
			return 3, err
		}
		p, err := sqlviews.New(ctx, pool, store, opts)
		if err != nil {
			return 3, err
		}
		head, err := store.Head(ctx)
		if err != nil {
			return 3, err
		}
		start := time.Now()
		switch err := p.CatchUpTo(ctx, head); {
		case errors.Is(err, sqlviews.ErrBusy):
			fmt.Fprintln(stdout, "sql views: reset; the running projector (turnstile serve) folds them again from position 0")
			return 0, nil
		case err != nil:
			return 3, err
		}
		secs := time.Since(start).Seconds()
		fmt.Fprintf(stdout, "sql views: reset and rebuilt up to position %d in %.2fs (%.0f events/s)\n", head, secs, float64(head)/max(secs, 1e-9))
		return 0, nil
	}
	rep, err := sqlviews.Check(ctx, pool, store, opts, 20)
	if err != nil {
		return 3, err
	}
	rate := float64(rep.Position) / max(rep.RebuildSeconds, 1e-9)
	if rep.Equal() {
		fmt.Fprintf(stdout, "sql views: the tables (%d executions, %d queue_stats rows) equal a rebuild from position 0 at position %d (rebuilt in %.2fs, %.0f events/s)\n",
			rep.Executions, rep.QueueStats, rep.Position, rep.RebuildSeconds, rate)
		return 0, nil
	}
	fmt.Fprintf(stdout, "sql views: %d DIFFERENCES from a rebuild at position %d\n", len(rep.Differences), rep.Position)
	for _, d := range rep.Differences {
		fmt.Fprintln(stdout, "  "+d)
	}
	return 1, nil
}
