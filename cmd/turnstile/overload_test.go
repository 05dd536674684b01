package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/projections"
)

// TestOverloadThroughHTTP floods two actions of a real `turnstile serve`
// over HTTP: one with a queue cap of 5, one with on_limit reject and a rate
// limit. Every flood request is answered 202 or 429 (never a 5xx); a 429
// writes nothing, and a rate-limited 429 says Retry-After; the flooded
// queue never holds more than its cap; and meanwhile the executions of the
// other actions all complete. The audit of the log passes afterwards.
func TestOverloadThroughHTTP(t *testing.T) {
	t.Parallel()
	bin := turnstileBinary(t)
	dir := t.TempDir()
	srv := startServe(t, bin, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	policies := []domain.Policy{
		{Ref: "flood.capped", Runner: "core.sleep", MaxConcurrent: 1, MaxQueueLength: 5},
		{Ref: "flood.metered", Runner: "core.noop", MaxConcurrent: 20, OnLimit: domain.OnLimitReject, RateLimit: &domain.RateLimit{Count: 5, PerSeconds: 1}},
	}
	for i := range 4 {
		policies = append(policies, domain.Policy{Ref: fmt.Sprintf("calm.a%d", i), Runner: "core.echo", MaxConcurrent: 2})
	}
	for _, p := range policies {
		if _, err := call(ctx, "POST", srv.url+"/api/v1/actions", p, nil, nil); err != nil {
			t.Fatal(err)
		}
	}

	type answer struct {
		code       int
		typ, retry string
		id         string
	}
	post := func(body map[string]any) (answer, error) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.url+"/api/v1/executions", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return answer{}, err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var v struct{ ID, Type string }
		_ = json.Unmarshal(data, &v)
		return answer{code: resp.StatusCode, typ: v.Type, retry: resp.Header.Get("Retry-After"), id: v.ID}, nil
	}

	// The flood: 16 clients for 4 seconds, as fast as the server answers.
	var (
		mu       sync.Mutex
		codes    = map[string]map[int]int{} // action → status → count
		accepted = map[string]int{}         // action → 202s
		bad      []string
	)
	stop := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	for c := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				ref, input := "flood.capped", map[string]any{"seconds": 0.2}
				if (c+i)%2 == 1 {
					ref, input = "flood.metered", map[string]any{}
				}
				a, err := post(map[string]any{"action": ref, "input": input})
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						bad = append(bad, err.Error())
						mu.Unlock()
					}
					return
				}
				mu.Lock()
				if codes[ref] == nil {
					codes[ref] = map[int]int{}
				}
				codes[ref][a.code]++
				switch {
				case a.code == http.StatusAccepted:
					accepted[ref]++
				case a.code != http.StatusTooManyRequests:
					bad = append(bad, fmt.Sprintf("%s: %d", ref, a.code))
				case ref == "flood.metered" && a.typ == "https://turnstile.dev/problems/rate-limited":
					if n, err := strconv.Atoi(a.retry); err != nil || n < 1 || n > 1 {
						bad = append(bad, fmt.Sprintf("%s: 429 rate-limited with Retry-After %q, want 1 (a 1 s window)", ref, a.retry))
					}
				case a.typ != "https://turnstile.dev/problems/queue-full" && a.typ != "https://turnstile.dev/problems/no-free-slot":
					bad = append(bad, fmt.Sprintf("%s: 429 of type %q", ref, a.typ))
				}
				mu.Unlock()
			}
		}()
	}

	// Meanwhile the calm actions: 80 executions, each must complete.
	var calm []string
	calmStart := time.Now()
	for k := range 80 {
		a, err := post(map[string]any{"action": fmt.Sprintf("calm.a%d", k%4), "input": map[string]any{"k": k}})
		if err != nil || a.code != http.StatusAccepted {
			t.Fatalf("calm request %d: %+v %v", k, a, err)
		}
		calm = append(calm, a.id)
	}
	var slowest time.Duration
	for _, id := range calm {
		for {
			var v projections.ExecutionView
			if _, err := call(ctx, "GET", srv.url+"/api/v1/executions/"+id, nil, nil, &v); err != nil {
				t.Fatal(err)
			}
			if v.Status == domain.StatusCompleted {
				break
			}
			if v.Status.Terminal() || ctx.Err() != nil {
				t.Fatalf("calm execution %s: %s", id, v.Status)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	slowest = time.Since(calmStart)
	flooding := time.Now().Before(stop)
	wg.Wait()
	for _, b := range bad[:min(len(bad), 10)] {
		t.Error(b)
	}
	for _, ref := range []string{"flood.capped", "flood.metered"} {
		if codes[ref][http.StatusTooManyRequests] == 0 {
			t.Errorf("%s was never refused: %v", ref, codes[ref])
		}
	}

	// Wait for the flood's admitted executions to end, then read the log.
	for {
		var stats struct {
			QueueStats []projections.QueueStats `json:"queue_stats"`
		}
		if _, err := call(ctx, "GET", srv.url+"/api/v1/queue-stats", nil, nil, &stats); err != nil {
			t.Fatal(err)
		}
		busy := 0
		for _, s := range stats.QueueStats {
			busy += s.QueueLength + s.ActiveCount
		}
		if busy == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("still busy: %+v", stats.QueueStats)
		}
		time.Sleep(100 * time.Millisecond)
	}
	srv.stop(t)
	store, err := embedded.Open(filepath.Join(dir, "log"), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	auditLog(ctx, t, store)
	// Each 202 is one execution in the log, and a 429 is none; the capped
	// queue never held more than its cap.
	logged := map[string]int{}
	waiting, maxWaiting := 0, 0
	views := projections.NewViews()
	err = eachEvent(ctx, store, 0, func(env *domain.Envelope) error {
		if env.Type == domain.TypeExecutionRequested {
			ev, err := codec.Events.Decode(env)
			if err != nil {
				return err
			}
			logged[ev.(domain.ExecutionRequested).Action]++
		}
		if err := views.Apply([]domain.Envelope{*env}); err != nil {
			return err
		}
		if st, ok := views.Stats("flood.capped"); ok {
			waiting = st.QueueLength
			maxWaiting = max(maxWaiting, waiting)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"flood.capped", "flood.metered"} {
		if logged[ref] != accepted[ref] {
			t.Errorf("%s: %d requests in the log, %d answered 202", ref, logged[ref], accepted[ref])
		}
	}
	if maxWaiting > 5 {
		t.Errorf("the capped queue held %d waiting, over its cap of 5", maxWaiting)
	}
	t.Logf("flood answers %v; in the log %v (each either ran or was rejected there); the capped queue peaked at %d waiting; "+
		"80 calm executions on other actions all completed in %s (flood still running then: %v)",
		codes, logged, maxWaiting, slowest.Round(time.Millisecond), flooding)
}
