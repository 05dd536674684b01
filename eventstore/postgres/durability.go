package postgres

// The durability check of Open: the store promises that an appended event
// has reached the disk when Append returns, and PostgreSQL keeps that
// promise only with fsync and synchronous_commit on.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotDurable means the database runs with fsync or synchronous_commit
// off: a commit it acknowledged may be lost in a crash of the server (with
// fsync off, the whole cluster may be damaged), so Append could not keep its
// promise. Open fails with it unless Options.AllowNotDurable.
var ErrNotDurable = errors.New("the database does not make commits durable")

// setting is one row of pg_settings.
type setting struct {
	name, value, source string
}

// checkDurable reads fsync and synchronous_commit as a connection of pool
// sees them (the server's configuration, then the database's, the role's
// and the connection's own settings) and fails with ErrNotDurable if either
// is off, or only logs a warning if opts.AllowNotDurable.
func checkDurable(ctx context.Context, pool *pgxpool.Pool, opts Options) error {
	rows, err := pool.Query(ctx, `SELECT name, setting, source FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit')`)
	if err != nil {
		return fmt.Errorf("postgres: reading the durability settings: %w", err)
	}
	var settings []setting
	for rows.Next() {
		var s setting
		if err := rows.Scan(&s.name, &s.value, &s.source); err != nil {
			rows.Close()
			return fmt.Errorf("postgres: reading the durability settings: %w", err)
		}
		settings = append(settings, s)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("postgres: reading the durability settings: %w", err)
	}
	bad := notDurable(settings)
	if bad == "" {
		return nil
	}
	if opts.AllowNotDurable {
		opts.Logger.Warn("POSTGRESQL DOES NOT MAKE COMMITS DURABLE: appended events may be lost in a crash of the database server (opened anyway: Options.AllowNotDurable)", "settings", bad)
		return nil
	}
	return fmt.Errorf("postgres: %s: appended events could be lost in a crash of the database server; turn them on (postgresql.conf, or ALTER SYSTEM, ALTER DATABASE or ALTER ROLE … SET), or open with Options.AllowNotDurable (allow_not_durable=true in a store URL) where losing them does not matter: %w", bad, ErrNotDurable)
}

// notDurable names the settings that make commits not durable ("" if none).
// Every synchronous_commit value but off flushes the commit to the local WAL
// before it returns.
func notDurable(settings []setting) string {
	var bad []string
	for _, s := range settings {
		if s.value == "off" && (s.name == "fsync" || s.name == "synchronous_commit") {
			bad = append(bad, fmt.Sprintf("%s is off (set by %s)", s.name, s.source))
		}
	}
	return strings.Join(bad, ", ")
}
