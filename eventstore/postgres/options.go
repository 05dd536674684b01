package postgres

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"
)

// Defaults for the zero fields of Options.
const (
	DefaultSchema        = "turnstile"
	DefaultMaxBatch      = 2000
	DefaultPollInterval  = time.Second
	DefaultCommitTimeout = 30 * time.Second
)

// schemaName is what Options.Schema accepts: a plain lower-case identifier,
// short enough that the notification channel "<schema>.log" fits in
// PostgreSQL's 63-byte names.
var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,58}$`)

// Options configure a Store. The zero value uses the defaults below; Open
// fills zero fields with them and refuses invalid values.
type Options struct {
	// Schema is the PostgreSQL schema that holds the log's tables: lower-case
	// letters, digits and underscores, starting with a letter or underscore,
	// at most 59 bytes. Default DefaultSchema.
	Schema string

	// MaxBatch is the most events one group commit writes in a single
	// transaction. An Append or AppendMulti larger than this is still written
	// whole, in a transaction of its own. Default DefaultMaxBatch; at most
	// 100,000.
	MaxBatch int

	// PollInterval bounds how long a caught-up subscription waits before it
	// looks for new events by itself, in case a notification was lost (the
	// listening connection broke, or the writer's NOTIFY never arrived).
	// Notifications normally wake it at once. Default DefaultPollInterval;
	// between 10ms and 1 minute.
	PollInterval time.Duration

	// CommitTimeout bounds one group commit transaction, so that appends fail
	// instead of waiting forever on a database that does not answer. Default
	// DefaultCommitTimeout; at least 100ms.
	CommitTimeout time.Duration

	// AllowNotDurable lets Open open a database whose fsync or
	// synchronous_commit is off, where a crash of the server may lose
	// appends that returned (Open then logs a warning instead of failing
	// with ErrNotDurable). It is for tests and throwaway data only. In a
	// store URL: allow_not_durable=true.
	AllowNotDurable bool

	// Logger receives what the store cannot return to a caller: the listening
	// connection breaking and reconnecting, and a database that is not
	// durable when AllowNotDurable lets Open go on. Default: discard.
	Logger *slog.Logger
}

// Validate reports every invalid field of o. Zero fields are valid: they mean
// the default.
func (o Options) Validate() error {
	var errs []error
	if o.Schema != "" && !schemaName.MatchString(o.Schema) {
		errs = append(errs, fmt.Errorf("option Schema %q: must match %s", o.Schema, schemaName))
	}
	if o.MaxBatch < 0 || o.MaxBatch > 100_000 {
		errs = append(errs, fmt.Errorf("option MaxBatch %d: must be 0 (default) or 1..100000", o.MaxBatch))
	}
	if o.PollInterval != 0 && (o.PollInterval < 10*time.Millisecond || o.PollInterval > time.Minute) {
		errs = append(errs, fmt.Errorf("option PollInterval %v: must be 0 (default) or 10ms..1m", o.PollInterval))
	}
	if o.CommitTimeout != 0 && o.CommitTimeout < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("option CommitTimeout %v: must be 0 (default) or at least 100ms", o.CommitTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("postgres: invalid options: %w", err)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.CommitTimeout == 0 {
		o.CommitTimeout = DefaultCommitTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}
