package sqlviews

import (
	"context"
	"embed"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/turnstile/turnstile/eventstore/postgres/pgmigrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one versioned change of the read models' tables.
type Migration = pgmigrate.Migration

// migrations lists the embedded migrations, applied and checked in the
// schema's read_model_migrations table.
var migrations = pgmigrate.Set{Who: "sqlviews", Table: versionTable, LockKey: migrateLockKey,
	Migrations: pgmigrate.Load(migrationFiles, "migrations", "sqlviews"), TooNew: ErrSchemaTooNew, NotReady: ErrSchemaNotReady}

// Migrations returns every migration this build knows, in version order.
func Migrations() []Migration { return append([]Migration(nil), migrations.Migrations...) }

// SchemaVersion is the version of the read models' tables this build needs.
func SchemaVersion() int { return migrations.Latest() }

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
	if schema == "" {
		schema = DefaultSchema
	}
	if err := validSchema(schema); err != nil {
		return nil, err
	}
	return migrations.ApplyPool(ctx, pool, schema)
}

// checkSchema fails unless the tables in schema are at SchemaVersion.
func checkSchema(ctx context.Context, q pgmigrate.Querier, schema string) error {
	return migrations.Check(ctx, q, schema)
}
