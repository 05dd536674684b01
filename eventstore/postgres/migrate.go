package postgres

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

// Migration is one versioned change of the store's schema.
type Migration struct {
	Version int    // 1, 2, …: applied in this order, each exactly once
	Name    string // from the file name, e.g. "log" for 0001_log.sql
	sql     string
}

// migrations lists the embedded migrations in version order. It panics if a
// file is misnamed or a version is missing, which a unit test catches.
var migrations = loadMigrations(migrationFiles)

func loadMigrations(files fs.FS) []Migration {
	names, err := fs.Glob(files, "migrations/*.sql")
	if err != nil {
		panic(err)
	}
	var ms []Migration
	for i, name := range names { // fs.Glob sorts
		base := strings.TrimSuffix(path.Base(name), ".sql")
		num, label, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || len(num) != 4 || label == "" {
			panic(fmt.Sprintf("postgres: migration file %s: want NNNN_name.sql", name))
		}
		if v != i+1 {
			panic(fmt.Sprintf("postgres: migration file %s: version %d, want %d (no gaps, no duplicates)", name, v, i+1))
		}
		b, err := fs.ReadFile(files, name)
		if err != nil {
			panic(err)
		}
		ms = append(ms, Migration{Version: v, Name: label, sql: string(b)})
	}
	if len(ms) == 0 {
		panic("postgres: no migrations embedded")
	}
	return ms
}

// Migrations returns every migration this build knows, in version order. The
// last one's Version is the schema version Open requires.
func Migrations() []Migration {
	return append([]Migration(nil), migrations...)
}

// SchemaVersion is the schema version this build of the store requires.
func SchemaVersion() int { return migrations[len(migrations)-1].Version }

// ErrSchemaNotReady is returned (wrapped) by Open when the schema is missing
// or behind this build: run `turnstile migrate` (postgres.Migrate) first.
var ErrSchemaNotReady = errors.New("schema not migrated")

// ErrSchemaTooNew is returned (wrapped) when the schema was migrated by a
// newer build of turnstile than this one.
var ErrSchemaTooNew = errors.New("schema is newer than this build of turnstile")

// migrateLockKey is the first key of the advisory lock Migrate holds; the
// second is hashtext(schema).
const migrateLockKey = 0x7475726e // "turn"

// Migrate brings schema ("" means DefaultSchema) of the database pool
// connects to up to SchemaVersion, creating it if needed, and returns the
// migrations it applied (none if the schema was current). All of them run in
// one transaction, so a failure leaves the schema as it was. It is safe to
// call from several processes at once: an advisory lock per schema
// serialises them, and every caller after the first finds nothing to do. A
// schema migrated by a newer build is refused with ErrSchemaTooNew.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) ([]Migration, error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	// A connection of its own, closed at the end: the session-level lock
	// goes with it, whatever happens.
	conn := c.Hijack()
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	return migrate(ctx, conn, schema)
}

// MigrateURL is Migrate on a database named by a postgres:// URL (see
// OpenURL). A "schema" parameter names the schema when schema is "".
func MigrateURL(ctx context.Context, url, schema string) ([]Migration, error) {
	cfg, schema, err := parseURL(url, schema)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	return migrate(ctx, conn, schema)
}

// migrate runs Migrate on conn, which the caller closes afterwards. The
// advisory lock is a session lock taken before the migration transaction
// begins: a transaction that waited for a lock inside it could still see the
// catalog as it was when it began (CREATE SCHEMA IF NOT EXISTS would then
// fail on a schema another caller just created).
func migrate(ctx context.Context, conn *pgx.Conn, schema string) (applied []Migration, err error) {
	if schema == "" {
		schema = DefaultSchema
	}
	if err := (Options{Schema: schema}).Validate(); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, hashtext($2))", int32(migrateLockKey), schema); err != nil {
		return nil, fmt.Errorf("postgres: migrate %q: %w", schema, err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: migrate %q: %w", schema, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	ident := pgx.Identifier{schema}.Sanitize()
	table := pgx.Identifier{schema, "schema_migrations"}.Sanitize()
	for _, sql := range []string{
		"CREATE SCHEMA IF NOT EXISTS " + ident,
		"SET LOCAL search_path TO " + ident, // for the migration files
		`CREATE TABLE IF NOT EXISTS ` + table + ` (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`,
	} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("postgres: migrate %q: %w", schema, err)
		}
	}
	var current int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+table).Scan(&current); err != nil {
		return nil, fmt.Errorf("postgres: migrate %q: reading schema_migrations: %w", schema, err)
	}
	if current > SchemaVersion() {
		return nil, fmt.Errorf("postgres: migrate %q: schema is at version %d, this build knows up to %d: %w", schema, current, SchemaVersion(), ErrSchemaTooNew)
	}
	for _, m := range migrations[current:] {
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return nil, fmt.Errorf("postgres: migrate %q: migration %04d_%s: %w", schema, m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
			return nil, fmt.Errorf("postgres: migrate %q: recording migration %d: %w", schema, m.Version, err)
		}
		applied = append(applied, m)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("postgres: migrate %q: commit: %w", schema, err)
	}
	return applied, nil
}

// checkSchema fails unless schema is at exactly SchemaVersion.
func checkSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	var current int
	err := pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&current)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") { // undefined table, schema
		err, current = nil, 0
	}
	switch {
	case err != nil:
		return fmt.Errorf("postgres: reading the version of schema %q: %w", schema, err)
	case current < SchemaVersion():
		return fmt.Errorf("postgres: schema %q is at version %d, this build needs %d: run turnstile migrate: %w", schema, current, SchemaVersion(), ErrSchemaNotReady)
	case current > SchemaVersion():
		return fmt.Errorf("postgres: schema %q is at version %d, this build knows up to %d: upgrade turnstile: %w", schema, current, SchemaVersion(), ErrSchemaTooNew)
	}
	return nil
}
