package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The events table is partitioned by position range (migration 3): each
// partition holds log_head.partition_size positions (DefaultPartitionSize
// unless SetPartitionSize changed it), listed in log_partitions. The
// committers create the next partition ahead, once the head has passed half
// of the last one (add_partitions makes it a table of its own and then
// attaches it, which blocks neither readers nor writers), and, should an
// insert still find no partition for its rows (another process raced far
// ahead), create it and decide the group again. A trim drops the partitions
// wholly below the live log's start (trim.go).

// DefaultPartitionSize is the positions per partition of a schema Migrate
// creates.
const DefaultPartitionSize = 1_000_000

// partitions is what a Store knows of the partitions: enough to create the
// next one in time.
type partitions struct {
	size atomic.Int64                    // log_head.partition_size
	end  atomic.Int64                    // the end of the last partition
	head atomic.Uint64                   // log_head.next as the Store's last commit left it
	list atomic.Pointer[[]livePartition] // log_partitions when last read, by lo
}

// loadPartitions reads the partition size, the end of the last partition
// and the head.
func (s *Store) loadPartitions(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) error {
	var size, end, next int64
	var los, his []int64
	var names []string
	err := q.QueryRow(ctx, `SELECT partition_size, coalesce((SELECT max(hi) FROM `+s.sql.partitions+`), 0), next,
		(SELECT coalesce(array_agg(lo ORDER BY lo), '{}') FROM `+s.sql.partitions+`),
		(SELECT coalesce(array_agg(hi ORDER BY lo), '{}') FROM `+s.sql.partitions+`),
		(SELECT coalesce(array_agg(name ORDER BY lo), '{}') FROM `+s.sql.partitions+`)
		FROM `+s.sql.headTable).
		Scan(&size, &end, &next, &los, &his, &names)
	if err != nil {
		return fmt.Errorf("postgres: reading the partitions: %w", err)
	}
	if len(his) != len(los) || len(names) != len(los) {
		return fmt.Errorf("postgres: reading the partitions: %d, %d and %d bounds and names", len(los), len(his), len(names))
	}
	list := make([]livePartition, len(los))
	for i := range los {
		list[i] = livePartition{lo: los[i], hi: his[i], name: names[i]}
	}
	s.parts.list.Store(&list)
	s.parts.size.Store(size)
	s.parts.end.Store(end)
	s.parts.head.Store(uint64(next))
	return nil
}

// sawHead raises the head the Store knows of to next.
func (p *partitions) sawHead(next uint64) {
	for {
		h := p.head.Load()
		if next <= h || p.head.CompareAndSwap(h, next) {
			return
		}
	}
}

// needPartitions reports whether the partitions end less than half a
// partition past a group of n events at the head this Store last saw.
func (s *Store) needPartitions(n int) bool {
	return int64(s.parts.head.Load())+int64(n)+s.parts.size.Load()/2 >= s.parts.end.Load()
}

// addPartitions creates partitions until they reach half a partition past
// the head plus n events.
func (s *Store) addPartitions(ctx context.Context, n int) error {
	_, err := s.pool.Exec(ctx, `SELECT `+s.sql.addPartitions+`($1::text, (SELECT next + $2::bigint + partition_size / 2 FROM `+s.sql.headTable+`))`,
		s.opts.Schema, int64(n))
	if err == nil {
		err = s.loadPartitions(ctx, s.pool)
	}
	if err != nil {
		return fmt.Errorf("postgres: creating partitions: %w", err)
	}
	return nil
}

// isNoPartition reports whether err is PostgreSQL's refusal of a row that no
// partition holds, or that the partition it was inserted into directly does
// not (direct.go).
func isNoPartition(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514" &&
		(strings.Contains(pgErr.Message, "no partition") || strings.Contains(pgErr.Message, "violates partition constraint"))
}

// SetPartitionSize sets how many positions each partition of the log in
// schema ("" means DefaultSchema) created from now on holds (a trim reclaims
// space a partition at a time). On a log that has never had an event it
// also remakes the (empty) partitions with the new size. The schema must be
// migrated.
func SetPartitionSize(ctx context.Context, pool *pgxpool.Pool, schema string, size int64) error {
	schema, err := migrationSchema(schema)
	if err != nil {
		return err
	}
	if size <= 0 {
		return fmt.Errorf("postgres: partition size %d: must be positive", size)
	}
	sql := newStatements(schema)
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var next int64
		if err := tx.QueryRow(ctx, sql.lockHead).Scan(&next); err != nil {
			return fmt.Errorf("postgres: set partition size: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE `+sql.headTable+` SET partition_size = $1`, size); err != nil {
			return fmt.Errorf("postgres: set partition size: %w", err)
		}
		if next > 0 {
			return nil
		}
		rows, err := tx.Query(ctx, `DELETE FROM `+sql.partitions+` RETURNING name`)
		if err != nil {
			return fmt.Errorf("postgres: set partition size: %w", err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("postgres: set partition size: %w", err)
		}
		for _, name := range names {
			if _, err := tx.Exec(ctx, `DROP TABLE `+pgx.Identifier{schema, name}.Sanitize()); err != nil {
				return fmt.Errorf("postgres: set partition size: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `SELECT `+sql.addPartitions+`($1::text, $2::bigint)`, schema, size); err != nil {
			return fmt.Errorf("postgres: set partition size: %w", err)
		}
		return nil
	})
}
