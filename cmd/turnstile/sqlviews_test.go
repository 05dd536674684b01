package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/turnstile/turnstile/projections"
)

// pgFreshSchemaURL returns a postgres:// URL on a fresh schema (dropped at the
// end), or skips the test when no database is configured (never in CI).
func pgFreshSchemaURL(t *testing.T) string {
	t.Helper()
	base := pgTestURL(t)
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	schema := "cmd_" + hex.EncodeToString(b)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	})
	return u.String()
}

func runCmd(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String() + errb.String()
}

// metricValue returns a metric's value from /metrics ("" if absent).
func metricValue(t *testing.T, server, name string) string {
	t.Helper()
	resp, err := http.Get(server + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// TestServeKeepsSQLViews: migrate creates the read model tables, serve on
// PostgreSQL keeps them (its /metrics report the lag), their rows show what
// the API shows, and rebuild checks them and refolds them under the
// running server.
func TestServeKeepsSQLViews(t *testing.T) {
	storeURL := pgFreshSchemaURL(t)
	if code, out := runCmd(t, "migrate", "--store", storeURL); code != 0 || !strings.Contains(out, "read model tables at version 1") {
		t.Fatalf("migrate: exit %d\n%s", code, out)
	}
	p := startServe(t, turnstileBinary(t), t.TempDir(), "--store", storeURL, "--workers", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := call(ctx, "POST", p.url+"/api/v1/actions", map[string]any{"ref": "demo", "runner": "core.noop", "max_concurrent": 2}, nil, nil); err != nil {
		t.Fatal(err)
	}
	const n = 30
	for i := range n {
		if _, err := call(ctx, "POST", p.url+"/api/v1/executions", map[string]any{"action": "demo", "input": map[string]any{"i": i}}, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	var stats projections.QueueStats
	waitUntil := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			if ctx.Err() != nil {
				t.Fatalf("waiting for %s:\n%s", what, p.logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitUntil("every execution to complete", func() bool {
		_, err := call(ctx, "GET", p.url+"/api/v1/actions/demo/queue-stats", nil, nil, &stats)
		return err == nil && stats.TotalCompleted == n
	})
	waitUntil("the tables to catch up", func() bool {
		return metricValue(t, p.url, "turnstile_sql_views_lag_events") == "0" && metricValue(t, p.url, "turnstile_sql_views_active") == "1"
	})

	conn, err := pgx.Connect(ctx, os.Getenv("TURNSTILE_POSTGRES_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	schema := regexp.MustCompile(`schema=(\w+)`).FindStringSubmatch(storeURL)[1]
	var completed, enqueued int64
	var p50 float64
	var done int
	if err := conn.QueryRow(ctx, `SELECT total_completed, total_enqueued, wait_p50_ms,
		(SELECT count(*) FROM `+schema+`.executions WHERE action = 'demo' AND status = 'completed')
		FROM `+schema+`.queue_stats WHERE action = 'demo'`).Scan(&completed, &enqueued, &p50, &done); err != nil {
		t.Fatal(err)
	}
	// The server's stats may have moved on (worker heartbeats do not touch
	// them): the figures the test waited for are final.
	if completed != n || enqueued != n || done != n || p50 != stats.WaitP50Ms {
		t.Fatalf("queue_stats row: completed %d, enqueued %d, p50 %v, %d completed rows; the API: %+v", completed, enqueued, p50, done, stats)
	}

	if code, out := runCmd(t, "rebuild", "--store", storeURL, "--sql-views"); code != 0 || !strings.Contains(out, fmt.Sprintf("%d executions", n)) {
		t.Fatalf("rebuild --sql-views: exit %d\n%s", code, out)
	}
	// Reset under the running server: its projector folds them again, or,
	// if the reset made it let go of its lock for a moment (it notices the
	// reset within a tick and starts over), the command folds them itself.
	if code, out := runCmd(t, "rebuild", "--store", storeURL, "--sql-views-reset"); code != 0 ||
		!strings.Contains(out, "running projector") && !strings.Contains(out, "reset and rebuilt") {
		t.Fatalf("rebuild --sql-views-reset: exit %d\n%s", code, out)
	}
	waitUntil("the tables to be folded again", func() bool {
		var rows int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM "+schema+".executions").Scan(&rows)
		return err == nil && rows == n && metricValue(t, p.url, "turnstile_sql_views_lag_events") == "0"
	})
	p.stop(t)
	if code, out := runCmd(t, "rebuild", "--store", storeURL, "--sql-views"); code != 0 || !strings.Contains(out, "equal a rebuild") {
		t.Fatalf("rebuild --sql-views after the refold: exit %d\n%s", code, out)
	}
	if code, out := runCmd(t, "rebuild", "--data", t.TempDir(), "--sql-views"); code != 2 {
		t.Fatalf("rebuild --sql-views without a postgres store: exit %d\n%s", code, out)
	}
}
