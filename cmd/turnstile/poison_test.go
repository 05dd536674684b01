package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/postgres"
	"github.com/turnstile/turnstile/projections"
)

// TestPoisonEventsThroughServe writes malformed events (1% of the requests:
// an unknown type, and a known type whose data does not decode) straight
// into the PostgreSQL log that a real `turnstile serve` runs on, while
// clients request executions over HTTP. Every execution still ends as its
// runner says; /metrics counts the events the read model and the executor
// passed over; a restart folds past them again; the audit names exactly
// them and nothing else.
func TestPoisonEventsThroughServe(t *testing.T) {
	t.Parallel()
	dbURL := os.Getenv("TURNSTILE_POSTGRES_URL")
	if dbURL == "" {
		t.Skip("TURNSTILE_POSTGRES_URL is not set (scripts/with-postgres.sh sets it)")
	}
	bin := turnstileBinary(t)
	schema := "poison_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	t.Cleanup(func() { dropSchema(t, dbURL, schema) })
	env := []string{"TURNSTILE_PG_SCHEMA=" + schema}
	opts := serveOpts{args: []string{"--store", dbURL, "--migrate"}, env: env}
	srv := startServeWith(t, bin, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	store, err := postgres.OpenURL(ctx, dbURL, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	for i, runner := range []string{"core.echo", "core.echo", "core.fail"} {
		p := domain.Policy{Ref: fmt.Sprintf("poison.a%d", i), Runner: runner, MaxConcurrent: 2}
		if _, err := call(ctx, "POST", srv.url+"/api/v1/actions", p, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	malformed := []domain.Envelope{
		{Type: "execution.unheard_of", Data: json.RawMessage(`{"x":1}`)},
		{Type: domain.TypeExecutionRequested, Data: json.RawMessage(`{"action":["not","a","ref"]}`)},
	}
	ids := map[string]string{}
	for k := range 200 {
		if k%100 == 50 {
			env := malformed[k/100]
			env.ID, env.SchemaVersion, env.Owner = uuid.New(), 1, domain.OwnerExecutor
			if _, err := store.Append(ctx, domain.ExecutionStream(uuid.NewString()), eventstore.Any, env); err != nil {
				t.Fatal(err)
			}
		}
		ref := fmt.Sprintf("poison.a%d", k%3)
		input := map[string]any{"k": k}
		if k%3 == 2 { // core.fail: its input is checked when requested
			input = map[string]any{"message": fmt.Sprintf("planned failure %d", k)}
		}
		var acc struct{ ID string }
		if _, err := call(ctx, "POST", srv.url+"/api/v1/executions", map[string]any{"action": ref, "input": input}, nil, &acc); err != nil {
			t.Fatal(err)
		}
		ids[acc.ID] = ref
	}
	for id, ref := range ids {
		for {
			var v projections.ExecutionView
			if _, err := call(ctx, "GET", srv.url+"/api/v1/executions/"+id, nil, nil, &v); err != nil {
				t.Fatal(err)
			}
			if v.Status.Terminal() {
				if want := map[bool]domain.Status{true: domain.StatusFailed, false: domain.StatusCompleted}[ref == "poison.a2"]; v.Status != want {
					t.Errorf("execution %s of %s: %s, want %s", id, ref, v.Status, want)
				}
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("execution %s of %s did not end: %s", id, ref, v.Status)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	checkMetrics := func(srv *serveProc, lagSeen bool) {
		t.Helper()
		m := scrape(ctx, t, srv.url)
		for name, want := range map[string]float64{
			"turnstile_projection_skipped_events_total": 2,
			"turnstile_executor_skipped_events_total":   2,
			"turnstile_bus_poison_messages_total":       0, // nothing malformed reaches the bus: the forwarder reads only decodable handoffs
		} {
			if got, ok := m[name]; !ok || got != want {
				t.Errorf("/metrics %s = %v (present: %v), want %v", name, got, ok, want)
			}
		}
		if lagSeen && m["turnstile_projection_lag_seconds_count"] == 0 {
			t.Errorf("/metrics has no projection lag observations")
		}
	}
	checkMetrics(srv, true)
	srv.stop(t)
	srv = startServeWith(t, bin, opts) // the restart folds past them again
	checkMetrics(srv, false)           // (nothing new committed yet: no lag observed)
	srv.stop(t)

	rep, err := projections.Audit(ctx, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	decode := 0
	for _, v := range rep.Violations {
		if v.Rule != "decode" {
			t.Errorf("audit: position %d %s %s [%s] %s", v.Position, v.Stream, v.Type, v.Rule, v.Detail)
		}
		decode++
	}
	if decode != len(malformed) || rep.Ended != len(ids) || len(rep.Open) != 0 {
		t.Errorf("audit: %d undecodable events (want %d), %d ended (want %d), %d open", decode, len(malformed), rep.Ended, len(ids), len(rep.Open))
	}
	code, out, _ := runCLI(ctx, t, bin, env, "audit", "--store", dbURL)
	if code != 1 || strings.Count(out, "[decode]") != len(malformed) {
		t.Errorf("turnstile audit: exit %d, want 1 with %d decode violations:\n%s", code, len(malformed), out)
	}
}

// scrape reads /metrics into a map of unlabelled series (and _count, _sum).
func scrape(ctx context.Context, t *testing.T, base string) map[string]float64 {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(name, "{") {
			continue
		}
		if f, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] = f
		}
	}
	return out
}
