// The read model's runners in the shape of every long-running part
// (internal/startstop): the in-memory views the API reads, and the
// PostgreSQL tables (projections/sqlviews) kept beside them.

package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/internal/backoff"
	"github.com/turnstile/turnstile/internal/startstop"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/projections/sqlviews"
)

// NewReadModel returns the runner of the read model views on store: it
// folds the log up to its head as it is at Start (Started is closed then),
// then follows it, and with snaps saves a snapshot every snapEvery events,
// until Stop. While the log cannot be read (a database outage) it tries
// again with a growing pause (readRetry), logging each failure with the
// position it resumes from, and never ends by itself but for a closed
// store: Err says why then.
func NewReadModel(views *projections.Views, store eventstore.Store, snaps *projections.SnapshotFiles, snapEvery uint64, log *slog.Logger) *startstop.Func {
	return startstop.NewFunc(func(ctx context.Context, started func()) error {
		if err := retrying(ctx, log, "fold the log into the read model", views.Next, func() error { return views.CatchUp(ctx, store) }); err != nil {
			return fmt.Errorf("fold the log into the read model: %w", err)
		}
		started()
		var wg sync.WaitGroup
		defer wg.Wait()
		if snaps != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				views.KeepSnapshots(ctx, *snaps, snapEvery, log)
			}()
		}
		if err := retrying(ctx, log, "read model: follow the log", views.Next, func() error { return views.Run(ctx, store) }); err != nil {
			return fmt.Errorf("read model stopped: %w", err)
		}
		return nil
	})
}

// readRetry is the pause before reading the log again after a failure: it
// doubles from the first value up to the second (equal jitter), and starts
// again from the first once a read has made progress.
var readRetry = [2]time.Duration{100 * time.Millisecond, 5 * time.Second}

// retrying calls fn until it returns nil, ctx ends (nil) or the store is
// closed (its error), pausing after each failure (readRetry) and logging
// it with the position it resumes from (at). Its first success after a
// failure is logged too.
func retrying(ctx context.Context, log *slog.Logger, what string, at func() uint64, fn func() error) error {
	pause, failing := backoff.Backoff{Min: readRetry[0], Max: readRetry[1], Jitter: backoff.Equal}, false
	for {
		from := at()
		err := fn()
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			if failing {
				log.Info(what+": the log is readable again", "position", at())
			}
			return nil
		}
		if errors.Is(err, eventstore.ErrClosed) {
			return err
		}
		if at() > from {
			pause.Reset() // it got somewhere before failing
		}
		failing = true
		wait := pause.Next()
		log.Warn(what+": cannot read the log; trying again", "position", at(), "err", err, "in", wait)
		if !backoff.Sleep(ctx, wait) {
			return nil
		}
	}
}

// sqlViews keeps the PostgreSQL read model tables: its projector runs from
// Start, restarting from the committed checkpoint after a failure, until
// Stop, which also closes its pool.
type sqlViews struct {
	*startstop.Func
	Projector *sqlviews.Projector
	pool      *pgxpool.Pool
}

// newSQLViews connects to the database of a postgres:// store URL (the
// tables live in the log's schema) and readies the projector; with snaps,
// its fold keeps snapshots there every snapEvery events, and it keeps
// retainEnded ended executions in memory as serve's read model does.
func newSQLViews(ctx context.Context, storeURL string, store eventstore.Store, snaps *projections.SnapshotFiles, snapEvery uint64, retainEnded int, log *slog.Logger) (*sqlViews, error) {
	pool, schema, err := sqlviews.Connect(ctx, storeURL, PGSchema())
	if err != nil {
		return nil, err
	}
	opts := sqlviews.Options{Schema: schema, Logger: log, Snapshots: snaps, SnapshotEvery: snapEvery, RetainEnded: retainEnded}
	p, err := sqlviews.New(ctx, pool, store, opts)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("%w (or run serve with --sql-views=false)", err)
	}
	return &sqlViews{Projector: p, pool: pool, Func: startstop.NewFunc(func(ctx context.Context, started func()) error {
		started()
		pause := backoff.Backoff{Min: time.Second, Max: 30 * time.Second, Jitter: backoff.Equal}
		for {
			err := p.Run(ctx)
			if ctx.Err() != nil {
				return nil
			}
			wait := pause.Next()
			log.Error("sql views: projector stopped; restarting from the checkpoint", "err", err, "in", wait)
			if !backoff.Sleep(ctx, wait) {
				return nil
			}
		}
	})}, nil
}

// Stop stops the projector and closes its pool.
func (s *sqlViews) Stop() {
	s.Func.Stop()
	s.pool.Close()
}

// startViewsInLiveLog returns views, or, when the live log starts after
// views' position (the log before it was archived), the read model of the
// newest checkpoint the live log holds; and it forgets the executions
// that ended before the live log's start.
func startViewsInLiveLog(ctx context.Context, store eventstore.Store, views *projections.Views, log *slog.Logger) (*projections.Views, error) {
	t, ok := store.(eventstore.Trimmer)
	if !ok {
		return views, nil
	}
	first, _, err := t.Start(ctx)
	if err != nil || first == 0 {
		return views, err
	}
	if views.Next() < first {
		sn, m, ok, err := projections.LatestCheckpoint(ctx, store, first, func(m domain.CheckpointWritten, err error) {
			log.Warn("read model: not using a checkpoint", "position", m.Position, "err", err)
		})
		switch {
		case err != nil:
			return nil, fmt.Errorf("read model: read the log's checkpoints: %w", err)
		case !ok:
			return nil, fmt.Errorf("read model: the live log starts at %d, after the read model (%d), and holds no checkpoint it can start from", first, views.Next())
		}
		views = projections.ViewsFromCheckpoint(sn)
		log.Info("read model starts from a checkpoint in the log", "position", m.Position, "live", m.Live)
	}
	views.ForgetBefore(first)
	return views, nil
}
