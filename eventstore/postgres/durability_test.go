package postgres

import (
	"bytes"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/turnstile/turnstile/internal/pgtest"
)

// TestOpenRefusesSynchronousCommitOff: a database whose connections run
// with synchronous_commit off acknowledges commits before they are on disk,
// so Open refuses it with ErrNotDurable, naming the setting and where it
// comes from; with AllowNotDurable it opens and logs a warning. Set for the
// session (the pool's connections) and for a role.
func TestOpenRefusesSynchronousCommitOff(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t)
	ctx := pgtest.Context(t)
	// The shared cluster is durable: Open's check passes on it.
	if err := checkDurable(ctx, sharedPool.Get(t), Options{}.withDefaults()); err != nil {
		t.Fatalf("the test cluster: %v", err)
	}

	role := pgtest.Name("nosync_", 4)
	admin := sharedPool.Get(t)
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"ALTER ROLE " + role + " SET synchronous_commit = off",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT ON ALL TABLES IN SCHEMA " + schema + " TO " + role,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		for _, q := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := admin.Exec(pgtest.Context(t), q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})

	for _, c := range []struct {
		name   string
		source string // pg_settings.source of the setting
		config func(*pgxpool.Config)
	}{
		{"session", "client", func(cfg *pgxpool.Config) { cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off" }},
		{"role", "user", func(cfg *pgxpool.Config) { cfg.ConnConfig.User = role; cfg.ConnConfig.Password = "" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 2
			c.config(cfg)
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()

			s, err := Open(ctx, pool, Options{Schema: schema})
			if err == nil {
				_ = s.Close()
				t.Fatal("Open with synchronous_commit off succeeded, want ErrNotDurable")
			}
			if !errors.Is(err, ErrNotDurable) || !strings.Contains(err.Error(), "synchronous_commit is off (set by "+c.source+")") {
				t.Fatalf("Open with synchronous_commit off = %v, want ErrNotDurable naming synchronous_commit set by %s", err, c.source)
			}

			var logged bytes.Buffer
			s, err = Open(ctx, pool, Options{Schema: schema, AllowNotDurable: true, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			if err != nil {
				t.Fatalf("Open with AllowNotDurable: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if out := logged.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "NOT MAKE COMMITS DURABLE") || !strings.Contains(out, "synchronous_commit is off") {
				t.Fatalf("Open with AllowNotDurable logged %q, want a warning naming synchronous_commit", out)
			}
		})
	}
}

// TestOpenURLAllowNotDurable: allow_not_durable=true in a store URL is
// AllowNotDurable (and never reaches the server as a setting).
func TestOpenURLAllowNotDurable(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t)
	ctx := pgtest.Context(t)
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("options", "-c synchronous_commit=off")
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	if s, err := OpenURL(ctx, u.String(), Options{}); !errors.Is(err, ErrNotDurable) {
		if err == nil {
			_ = s.Close()
		}
		t.Fatalf("OpenURL with synchronous_commit off = %v, want ErrNotDurable", err)
	}
	q.Set("allow_not_durable", "true")
	u.RawQuery = q.Encode()
	s, err := OpenURL(ctx, u.String(), Options{})
	if err != nil {
		t.Fatalf("OpenURL with allow_not_durable=true: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	q.Set("allow_not_durable", "yes")
	u.RawQuery = q.Encode()
	if _, _, _, err := parseURL(u.String(), ""); err == nil || !strings.Contains(err.Error(), "allow_not_durable") {
		t.Fatalf("parseURL with allow_not_durable=yes = %v, want an error naming it", err)
	}
}

// TestNotDurable: fsync off (which a test cannot set on the shared cluster:
// it is the whole server's) and synchronous_commit off are named; every
// other synchronous_commit value flushes the local WAL and passes.
func TestNotDurable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		settings []setting
		want     string
	}{
		{[]setting{{"fsync", "on", "default"}, {"synchronous_commit", "on", "default"}}, ""},
		{[]setting{{"fsync", "off", "configuration file"}, {"synchronous_commit", "on", "default"}}, "fsync is off (set by configuration file)"},
		{[]setting{{"fsync", "off", "configuration file"}, {"synchronous_commit", "off", "user"}}, "fsync is off (set by configuration file), synchronous_commit is off (set by user)"},
		{[]setting{{"fsync", "on", "default"}, {"synchronous_commit", "local", "client"}}, ""},
		{[]setting{{"fsync", "on", "default"}, {"synchronous_commit", "remote_write", "database"}}, ""},
		{[]setting{{"fsync", "on", "default"}, {"synchronous_commit", "remote_apply", "database"}}, ""},
	} {
		if got := notDurable(c.settings); got != c.want {
			t.Errorf("notDurable(%v) = %q, want %q", c.settings, got, c.want)
		}
	}
}
