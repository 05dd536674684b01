package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/embedded"
)

// TestScheduleSurvivesKill9: a schedule ticking every second through four
// SIGKILLs of `turnstile serve` at random instants. Each tick is requested at
// most once (under the id derived from it) and in tick order, every
// requested tick's execution ends, and the audit is clean.
func TestScheduleSurvivesKill9(t *testing.T) {
	t.Parallel()
	bin := turnstileBinary(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := startServe(t, bin, dir)
	mustCLI(t, p.url, "actions", "create", "--ref", "tick.noop", "--runner", "core.noop")
	if code, err := call(ctx, "POST", p.url+"/api/v1/schedules", map[string]any{"ref": "every-second", "action": "tick.noop", "cron": "@every 1s"}, nil, nil); err != nil || code != http.StatusCreated {
		t.Fatalf("define the schedule: %d, %v", code, err)
	}
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for range 4 {
		time.Sleep(time.Duration(1500+rnd.IntN(2500)) * time.Millisecond)
		p.kill()
		time.Sleep(time.Duration(rnd.IntN(2500)) * time.Millisecond) // ticks missed while down
		p = startServe(t, bin, dir)
	}
	time.Sleep(3 * time.Second)
	if code, err := call(ctx, "DELETE", p.url+"/api/v1/schedules/every-second", nil, nil, nil); err != nil || code != http.StatusNoContent {
		t.Fatalf("delete the schedule: %d, %v", code, err)
	}
	// every requested tick ends before the clean stop
	for {
		var st struct {
			Enqueued  int `json:"total_enqueued"`
			Completed int `json:"total_completed"`
		}
		if _, err := call(ctx, "GET", p.url+"/api/v1/actions/tick.noop/queue-stats", nil, nil, &st); err != nil {
			t.Fatal(err)
		}
		if st.Enqueued > 0 && st.Completed == st.Enqueued {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("tick executions never all completed: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.stop(t)

	store, err := embedded.Open(filepath.Join(dir, "log"), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ticks := map[string]int{}
	var order []time.Time
	err = eachEvent(ctx, store, 0, func(e *domain.Envelope) error {
		if e.Type != domain.TypeExecutionRequested {
			return nil
		}
		var req domain.ExecutionRequested
		if err := json.Unmarshal(e.Data, &req); err != nil {
			return err
		}
		if req.Schedule != "every-second" {
			return nil
		}
		ticks[req.Tick]++
		at, err := time.Parse(time.RFC3339, req.Tick)
		if err != nil {
			return err
		}
		if n := len(order); n > 0 && !at.After(order[n-1]) {
			t.Errorf("tick %s requested after tick %s", req.Tick, order[n-1].Format(time.RFC3339))
		}
		order = append(order, at)
		if want := domain.ScheduleTickID("every-second", at); e.Stream != domain.ExecutionStream(want) {
			t.Errorf("tick %s requested in stream %s, want the derived id %s", req.Tick, e.Stream, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for tick, n := range ticks {
		if n != 1 {
			t.Errorf("tick %s requested %d times", tick, n)
		}
	}
	if len(ticks) < 8 {
		t.Errorf("%d ticks requested over some 15 s of a 1 s schedule", len(ticks))
	}
	auditLog(ctx, t, store)
	t.Logf("%d ticks, each requested once, through 4 SIGKILLs", len(ticks))
}
