// Opening the log a process runs on: where a store URL points, the
// backend it names, and the lease its executors contend for.

package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/diskfs"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/eventstore/kurrentdb"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/eventstore/postgres"
	"github.com/turnstile/turnstile/services/lease"
)

// ConfigError is a configuration a process cannot start with (a bad store
// URL, say), as opposed to a failure while it runs. Its message is the
// wrapped error's.
type ConfigError struct{ Err error }

func (e ConfigError) Error() string { return e.Err.Error() }
func (e ConfigError) Unwrap() error { return e.Err }

// Locate resolves a store URL, or a data directory when the URL is empty,
// into a backend ("embedded", "memory", "postgres" or "kurrentdb") and a
// location fit for logs (an embedded store's absolute directory, a URL
// without its password).
func Locate(storeURL, dataDir string) (kind, where string, err error) {
	if storeURL == "" {
		if dataDir == "" {
			return "", "", ConfigError{errors.New("give --data DIR or --store URL")}
		}
		abs, err := filepath.Abs(dataDir)
		if err != nil {
			return "", "", err
		}
		return "embedded", abs, nil
	}
	if scheme, _, _ := strings.Cut(storeURL, "://"); strings.HasPrefix(scheme, "kurrentdb") || strings.HasPrefix(scheme, "kurrent") ||
		strings.HasPrefix(scheme, "kdb") || strings.HasPrefix(scheme, "esdb") {
		return "kurrentdb", "kurrentdb", nil // url.Parse refuses a host list; the store validates the URL
	}
	u, err := url.Parse(storeURL)
	if err != nil {
		return "", "", ConfigError{fmt.Errorf("store URL %q: %w", storeURL, err)}
	}
	switch u.Scheme {
	case "embedded":
		p := u.Path
		if u.Host != "" { // embedded://relative/dir
			p = filepath.Join(u.Host, u.Path)
		}
		if p == "" {
			return "", "", ConfigError{fmt.Errorf("store URL %q names no directory", storeURL)}
		}
		return "embedded", p, nil
	case "memory":
		return "memory", "", nil
	case "postgres", "postgresql":
		return "postgres", u.Redacted(), nil
	default:
		return "", "", ConfigError{fmt.Errorf("store URL %q: unknown scheme %q (embedded:// is supported)", storeURL, u.Scheme)}
	}
}

// OpenStore opens the store a URL (or, when it is empty, a data directory)
// names, and returns it with its location for logs.
func OpenStore(storeURL, dataDir string) (eventstore.Store, string, error) {
	return OpenStoreLogged(storeURL, dataDir, nil)
}

// OpenStoreLogged is OpenStore with a logger for what the store does by
// itself: the embedded store's recovery (a torn tail cut, with its
// position), a write that failed and stopped its appends.
func OpenStoreLogged(storeURL, dataDir string, log *slog.Logger) (eventstore.Store, string, error) {
	kind, where, err := Locate(storeURL, dataDir)
	if err != nil {
		return nil, "", err
	}
	switch kind {
	case "embedded":
		addSyncProc()
		// The data directory holds the log in log/ and checkpoints in checkpoints/.
		s, err := embedded.Open(filepath.Join(where, "log"), embedded.Options{Logger: log})
		if err != nil {
			return nil, "", fmt.Errorf("open embedded store in %s: %w", where, err)
		}
		diskfs.WarnLoose(log, "data directory", where)
		return s, where, nil
	case "memory":
		return memstore.New(memstore.Options{}), "", nil
	case "postgres":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := postgres.OpenURL(ctx, storeURL, postgres.Options{Schema: PGSchema()})
		if err != nil {
			return nil, "", fmt.Errorf("open postgres store: %w", err)
		}
		return s, RedactURL(storeURL), nil
	case "kurrentdb":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := kurrentdb.OpenURL(ctx, storeURL)
		if err != nil {
			return nil, "", fmt.Errorf("open kurrentdb store: %w", err)
		}
		return s, "kurrentdb", nil
	}
	return nil, "", fmt.Errorf("store kind %q not supported", kind)
}

// addSyncProc gives the Go scheduler one P (a slot to run goroutines in)
// more than it takes by itself, once, unless GOMAXPROCS is set. The
// embedded store's committer spends about a third of its time in
// fdatasync, and Go hands the P of a goroutine blocked in a system call to
// another thread only once its monitor has seen the call twice, which
// under load often takes longer than an fdatasync (0.2–1 ms here): the
// core sits idle meanwhile. With one P more the other goroutines keep
// every core busy (bench lifecycle: 4–11 % more executions/s, request →
// running p99 41–89 → 31–37 ms, measured 2026-11-21).
func addSyncProc() {
	syncProcOnce.Do(func() {
		if os.Getenv("GOMAXPROCS") == "" {
			runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1)
		}
	})
}

var syncProcOnce sync.Once

// CheckpointDir is where a process keeps the forwarder's checkpoint and the
// snapshots of its folds: in the embedded store's data directory, or in
// memory ("", no snapshots) for other stores.
func CheckpointDir(kind, where string) string {
	if kind == "embedded" {
		return filepath.Join(where, "checkpoints")
	}
	return ""
}

// PGSchema is the PostgreSQL schema that holds the log: TURNSTILE_PG_SCHEMA,
// or the store's default ("").
func PGSchema() string { return os.Getenv("TURNSTILE_PG_SCHEMA") }

// RedactURL hides a URL's password, for logs.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// ExecutorLease returns the lease the executors of a PostgreSQL store's log
// contend for: an advisory lock named after the log's schema, on a
// connection to the same database.
func ExecutorLease(storeURL string) (*lease.Postgres, error) {
	u, err := url.Parse(storeURL)
	if err != nil {
		return nil, fmt.Errorf("store URL: %w", err)
	}
	q := u.Query()
	schema := q.Get("schema")
	if schema == "" {
		schema = PGSchema()
	}
	if schema == "" {
		schema = postgres.DefaultSchema
	}
	q.Del("schema") // ours, not a server setting
	u.RawQuery = q.Encode()
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		return nil, fmt.Errorf("store URL %s: %w", RedactURL(storeURL), err)
	}
	return &lease.Postgres{Conn: cfg, Name: "turnstile executor " + schema}, nil
}
