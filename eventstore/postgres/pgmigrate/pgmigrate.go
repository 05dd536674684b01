// Package pgmigrate applies versioned SQL migrations to a PostgreSQL schema:
// files named NNNN_name.sql, applied in order, each exactly once, all
// pending ones in one transaction, recorded in a version table of the
// schema, serialised across processes by an advisory lock. The log's store
// (eventstore/postgres) and the read-model tables (projections/sqlviews)
// each keep their own Set, so they evolve independently in one schema.
package pgmigrate

import (
	"context"
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

// Migration is one versioned change.
type Migration struct {
	Version int    // 1, 2, …: applied in this order, each exactly once
	Name    string // from the file name, e.g. "log" for 0001_log.sql
	SQL     string
}

// Set is one list of migrations and where it records them.
type Set struct {
	Who        string      // prefixes errors, e.g. "postgres"
	Table      string      // the version table in the schema
	LockKey    int32       // first key of the advisory lock (the second is hashtext(schema))
	Migrations []Migration // in version order, from Load
	// TooNew and NotReady are wrapped by the errors for a schema ahead of
	// and behind this build.
	TooNew, NotReady error
}

// Load reads dir/*.sql of files as migrations in version order. It panics
// if a file is misnamed or a version is missing or repeated: the files are
// embedded in the binary, so any test that loads the package catches it.
func Load(files fs.FS, dir, who string) []Migration {
	names, err := fs.Glob(files, dir+"/*.sql")
	if err != nil {
		panic(err)
	}
	var ms []Migration
	for i, name := range names { // fs.Glob sorts
		num, label, ok := strings.Cut(strings.TrimSuffix(path.Base(name), ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || len(num) != 4 || label == "" || v != i+1 {
			panic(fmt.Sprintf("%s: migration file %s: want %04d_name.sql (no gaps, no duplicates)", who, name, i+1))
		}
		b, err := fs.ReadFile(files, name)
		if err != nil {
			panic(err)
		}
		ms = append(ms, Migration{Version: v, Name: label, SQL: string(b)})
	}
	if len(ms) == 0 {
		panic(who + ": no migrations embedded")
	}
	return ms
}

// Latest is the version the last migration brings a schema to.
func (s Set) Latest() int { return s.Migrations[len(s.Migrations)-1].Version }

// Apply brings schema up to Latest on conn, creating the schema and the
// version table if needed, and returns the migrations it applied. They run
// in one transaction, so a failure leaves the schema as it was. The
// advisory lock is a session lock taken before the transaction begins (a
// transaction that waited for it inside could still see the catalog as it
// was when it began): the caller closes conn afterwards, which releases it.
func (s Set) Apply(ctx context.Context, conn *pgx.Conn, schema string) (applied []Migration, err error) {
	fail := func(format string, args ...any) ([]Migration, error) {
		return nil, fmt.Errorf("%s: migrate %q: "+format, append([]any{s.Who, schema}, args...)...)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, hashtext($2))", s.LockKey, schema); err != nil {
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
	ident := pgx.Identifier{schema}.Sanitize()
	table := pgx.Identifier{schema, s.Table}.Sanitize()
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
			return fail("%w", err)
		}
	}
	var current int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+table).Scan(&current); err != nil {
		return fail("reading %s: %w", s.Table, err)
	}
	if current > s.Latest() {
		return fail("at version %d, this build knows up to %d: %w", current, s.Latest(), s.TooNew)
	}
	for _, m := range s.Migrations[current:] {
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
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

// ApplyPool is Apply on a connection of its own taken from pool and closed
// at the end, so that the session's advisory lock goes with it, whatever
// happens.
func (s Set) ApplyPool(ctx context.Context, pool *pgxpool.Pool, schema string) ([]Migration, error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: migrate: %w", s.Who, err)
	}
	conn := c.Hijack()
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	return s.Apply(ctx, conn, schema)
}

// Querier is what Check reads with: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Check fails unless schema is at exactly Latest: behind wraps NotReady
// (run `turnstile migrate`), ahead wraps TooNew (upgrade turnstile).
func (s Set) Check(ctx context.Context, q Querier, schema string) error {
	var current int
	err := q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+pgx.Identifier{schema, s.Table}.Sanitize()).Scan(&current)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") { // undefined table, schema
		err, current = nil, 0
	}
	switch {
	case err != nil:
		return fmt.Errorf("%s: reading the version of schema %q: %w", s.Who, schema, err)
	case current < s.Latest():
		return fmt.Errorf("%s: schema %q is at version %d, this build needs %d: run turnstile migrate: %w", s.Who, schema, current, s.Latest(), s.NotReady)
	case current > s.Latest():
		return fmt.Errorf("%s: schema %q is at version %d, this build knows up to %d: upgrade turnstile: %w", s.Who, schema, current, s.Latest(), s.TooNew)
	}
	return nil
}
