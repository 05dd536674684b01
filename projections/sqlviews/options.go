package sqlviews

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/turnstile/turnstile/projections"
)

// Defaults for the zero fields of Options.
const (
	DefaultSchema   = "turnstile" // the same as the log's (eventstore/postgres)
	DefaultName     = "sql_views"
	DefaultMaxBatch = 8192
)

var (
	schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,58}$`)
	cpName     = regexp.MustCompile(`^[a-z0-9][a-z0-9_.\-]{0,99}$`)
)

// Options configure a Projector. The zero value uses the defaults.
type Options struct {
	// Schema holds the tables (created by Migrate): lower-case letters,
	// digits and underscores, at most 59 bytes. Default DefaultSchema.
	Schema string
	// Name is the projection's row in projection_checkpoints. Default
	// DefaultName.
	Name string
	// MaxBatch bounds how many events one transaction covers: the folding
	// goroutine waits while this many events are folded and not yet
	// committed. Default DefaultMaxBatch; 1..1,000,000.
	MaxBatch int
	// Logger receives the projector's progress and errors. Default: discard.
	Logger *slog.Logger
	// Snapshots, if set, keeps snapshots of the projector's fold (named
	// "sqlviews-" and Name), taken at a committed checkpoint every
	// SnapshotEvery events: a run starts from the latest one at or below
	// the checkpoint instead of folding the log from position 0.
	Snapshots *projections.SnapshotFiles
	// SnapshotEvery is how many events may be committed between snapshots.
	// Default DefaultSnapshotEvery.
	SnapshotEvery uint64
	// RetainEnded bounds the projector's fold as serve's --retain-ended
	// bounds the API's (0: every execution is kept): an ended execution is
	// forgotten once its row is committed and more recent ones fill the
	// bound. The tables keep every row.
	RetainEnded int
}

// DefaultSnapshotEvery is Options.SnapshotEvery's default (serve's).
const DefaultSnapshotEvery = 500_000

func validSchema(s string) error {
	if !schemaName.MatchString(s) {
		return fmt.Errorf("sqlviews: schema %q: must match %s", s, schemaName)
	}
	return nil
}

// Validate reports every invalid field of o; zero fields are valid.
func (o Options) Validate() error {
	var errs []error
	if o.Schema != "" {
		errs = append(errs, validSchema(o.Schema))
	}
	if o.Name != "" && !cpName.MatchString(o.Name) {
		errs = append(errs, fmt.Errorf("sqlviews: name %q: must match %s", o.Name, cpName))
	}
	if o.RetainEnded < 0 {
		errs = append(errs, fmt.Errorf("sqlviews: RetainEnded %d: must be >= 0", o.RetainEnded))
	}
	if o.MaxBatch < 0 || o.MaxBatch > 1_000_000 {
		errs = append(errs, fmt.Errorf("sqlviews: MaxBatch %d: must be 0 (default) or 1..1000000", o.MaxBatch))
	}
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.SnapshotEvery == 0 {
		o.SnapshotEvery = DefaultSnapshotEvery
	}
	return o
}

// Connect opens a pool on the database a postgres:// URL names, as the
// store's OpenURL reads it: a "schema" parameter is turnstile's, not the
// server's, and names the schema when schema is "" (they must agree
// otherwise). It returns the pool and the schema ("" if neither names one).
func Connect(ctx context.Context, rawURL, schema string) (*pgxpool.Pool, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, "", fmt.Errorf("sqlviews: database URL: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, "", fmt.Errorf("sqlviews: database URL scheme %q: want postgres:// or postgresql://", u.Scheme)
	}
	q := u.Query()
	if v := q.Get("schema"); v != "" {
		if schema != "" && schema != v {
			return nil, "", fmt.Errorf("sqlviews: database URL names schema %q, the caller %q", v, schema)
		}
		schema = v
	}
	q.Del("schema")
	u.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, "", fmt.Errorf("sqlviews: database URL: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, "", fmt.Errorf("sqlviews: %w", err)
	}
	return pool, schema, nil
}
