package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/turnstile/turnstile/eventstore/postgres/pgmigrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one versioned change of the store's schema.
type Migration = pgmigrate.Migration

// migrations lists the embedded migrations, applied and checked in the
// schema's schema_migrations table.
var migrations = pgmigrate.Set{Who: "postgres", Table: "schema_migrations", LockKey: migrateLockKey,
	Migrations: pgmigrate.Load(migrationFiles, "migrations", "postgres"), TooNew: ErrSchemaTooNew, NotReady: ErrSchemaNotReady}

// Migrations returns every migration this build knows, in version order. The
// last one's Version is the schema version Open requires.
func Migrations() []Migration {
	return append([]Migration(nil), migrations.Migrations...)
}

// SchemaVersion is the schema version this build of the store requires.
func SchemaVersion() int { return migrations.Latest() }

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
	schema, err := migrationSchema(schema)
	if err != nil {
		return nil, err
	}
	return migrations.ApplyPool(ctx, pool, schema)
}

// MigrateURL is Migrate on a database named by a postgres:// URL (see
// OpenURL). A "schema" parameter names the schema when schema is "".
func MigrateURL(ctx context.Context, url, schema string) ([]Migration, error) {
	cfg, schema, _, err := parseURL(url, schema) // migrating needs no durability check
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

// migrate runs Migrate on conn, which the caller closes afterwards.
func migrate(ctx context.Context, conn *pgx.Conn, schema string) ([]Migration, error) {
	schema, err := migrationSchema(schema)
	if err != nil {
		return nil, err
	}
	return migrations.Apply(ctx, conn, schema)
}

// migrationSchema is schema, or DefaultSchema for "", if it is a valid name.
func migrationSchema(schema string) (string, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	return schema, (Options{Schema: schema}).Validate()
}

// checkSchema fails unless schema is at exactly SchemaVersion.
func checkSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	return migrations.Check(ctx, pool, schema)
}
