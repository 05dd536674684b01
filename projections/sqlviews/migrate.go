package sqlviews

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one versioned change of the read models' tables.
type Migration struct {
	Version int    // 1, 2, …: applied in this order, each exactly once
	Name    string // from the file name, e.g. "read_models" for 0001_read_models.sql
	sql     string
}

// migrations are the embedded migrations in version order. A misnamed file
// or a gap panics at start-up, which every test catches.
var migrations = loadMigrations(migrationFiles)

func loadMigrations(files fs.FS) []Migration {
	names, err := fs.Glob(files, "migrations/*.sql")
	if err != nil {
		panic(err)
	}
	var ms []Migration
	for i, name := range names {
		num, label, ok := strings.Cut(strings.TrimSuffix(path.Base(name), ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || len(num) != 4 || label == "" || v != i+1 {
			panic(fmt.Sprintf("sqlviews: migration file %s: want %04d_name.sql", name, i+1))
		}
		b, err := fs.ReadFile(files, name)
		if err != nil {
			panic(err)
		}
		ms = append(ms, Migration{Version: v, Name: label, sql: string(b)})
	}
	if len(ms) == 0 {
		panic("sqlviews: no migrations embedded")
	}
	return ms
}

// Migrations returns every migration this build knows, in version order.
func Migrations() []Migration { return append([]Migration(nil), migrations...) }

// SchemaVersion is the version of the read models' tables this build needs.
func SchemaVersion() int { return migrations[len(migrations)-1].Version }

// versionTable records the applied migrations. It is not the log's
// schema_migrations: the log (eventstore/postgres) and the read models evolve
// on their own, and may live in the same schema.
const versionTable = "read_model_migrations"

// ErrSchemaNotReady is returned (wrapped) by New when the read models' tables
// are missing or older than this build: run `turnstile migrate` (Migrate).
var ErrSchemaNotReady = errors.New("read model tables not migrated")

// ErrSchemaTooNew is returned (wrapped) when the tables were migrated by a
// newer build of turnstile.
var ErrSchemaTooNew = errors.New("read model tables are newer than this build of turnstile")

// migrateLockKey is the first key of the advisory lock Migrate holds (the
// second is hashtext(schema)); the log's migrations use another.
const migrateLockKey = 0x7476_6d67 // "tvmg"

// Migrate creates or updates the read models' tables in schema ("" means
// DefaultSchema), creating the schema if needed, and returns the migrations
// it applied. They run in one transaction: a failure changes nothing. Safe
// to call from several processes at once (an advisory lock serialises them).
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) ([]Migration, error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlviews: migrate: %w", err)
	}
	// Closed at the end, so the session's advisory lock goes with it.
	conn := c.Hijack()
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	return migrate(ctx, conn, schema)
}

func migrate(ctx context.Context, conn *pgx.Conn, schema string) (applied []Migration, err error) {
	if schema == "" {
		schema = DefaultSchema
	}
	if err := validSchema(schema); err != nil {
		return nil, err
	}
	fail := func(format string, args ...any) ([]Migration, error) {
		return nil, fmt.Errorf("sqlviews: migrate %q: "+format, append([]any{schema}, args...)...)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, hashtext($2))", int32(migrateLockKey), schema); err != nil {
		return fail("%w", err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fail("%w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	table := pgx.Identifier{schema, versionTable}.Sanitize()
	for _, sql := range []string{
		"CREATE SCHEMA IF NOT EXISTS " + pgx.Identifier{schema}.Sanitize(),
		"SET LOCAL search_path TO " + pgx.Identifier{schema}.Sanitize(),
		`CREATE TABLE IF NOT EXISTS ` + table + ` (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`,
	} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fail("%w", err)
		}
	}
	var current int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+table).Scan(&current); err != nil {
		return fail("reading %s: %w", versionTable, err)
	}
	if current > SchemaVersion() {
		return fail("tables at version %d, this build knows up to %d: %w", current, SchemaVersion(), ErrSchemaTooNew)
	}
	for _, m := range migrations[current:] {
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fail("migration %04d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
			return fail("recording migration %d: %w", m.Version, err)
		}
		applied = append(applied, m)
	}
	if err := tx.Commit(ctx); err != nil {
		return fail("commit: %w", err)
	}
	return applied, nil
}

// checkSchema fails unless the tables in schema are at SchemaVersion.
func checkSchema(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema string) error {
	var current int
	err := q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+pgx.Identifier{schema, versionTable}.Sanitize()).Scan(&current)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") { // undefined table, schema
		err, current = nil, 0
	}
	switch {
	case err != nil:
		return fmt.Errorf("sqlviews: reading the version of the read model tables in %q: %w", schema, err)
	case current < SchemaVersion():
		return fmt.Errorf("sqlviews: read model tables in schema %q at version %d, this build needs %d: run turnstile migrate: %w", schema, current, SchemaVersion(), ErrSchemaNotReady)
	case current > SchemaVersion():
		return fmt.Errorf("sqlviews: read model tables in schema %q at version %d, this build knows up to %d: upgrade turnstile: %w", schema, current, SchemaVersion(), ErrSchemaTooNew)
	}
	return nil
}
