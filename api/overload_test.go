package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/internal/waitfor"
)

// TestEarlyRefusal: a request the action's queue would refuse (full; or on
// the limit with on_limit reject: no slot, rate limit) is answered 429 with
// nothing written, Retry-After for the rate limit; a retry of a request
// already recorded still gets its 202.
func TestEarlyRefusal(t *testing.T) {
	a, _ := newTestAPI(t, nil)
	ctx := context.Background()
	for _, p := range []domain.Policy{
		{Ref: "small", Runner: "core.noop", MaxQueueLength: 2},
		{Ref: "strict", Runner: "core.noop", MaxConcurrent: 1, OnLimit: domain.OnLimitReject},
		{Ref: "metered", Runner: "core.noop", MaxConcurrent: 5, OnLimit: domain.OnLimitReject, RateLimit: &domain.RateLimit{Count: 1, PerSeconds: 60}},
	} {
		if _, err := a.cmds.DefineAction(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	post := func(action, key string) *httptest.ResponseRecorder {
		req := request("POST", "/api/v1/executions", "", fmt.Sprintf(`{"action":%q,"input":{"seconds":0}}`, action))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		a.srv.Handler().ServeHTTP(rec, req)
		return rec
	}
	// No executor runs here: what is admitted waits, so the queues fill.
	for i, tc := range []struct {
		action, typ string
		admitted    int
		retryAfter  bool
	}{
		{"small", "queue-full", 2, false},
		{"strict", "no-free-slot", 1, false},
		{"metered", "rate-limited", 1, true},
	} {
		for n := range tc.admitted {
			if rec := post(tc.action, fmt.Sprintf("k-%d-%d", i, n)); rec.Code != http.StatusAccepted {
				t.Fatalf("%s request %d: %d %s", tc.action, n, rec.Code, rec.Body)
			}
		}
		waitQueued(t, a, tc.action, tc.admitted)
		head, _ := a.store.Head(ctx)
		rec := post(tc.action, "")
		var p struct{ Type, Detail string }
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		if rec.Code != http.StatusTooManyRequests || p.Type != "https://turnstile.dev/problems/"+tc.typ {
			t.Fatalf("%s, full: %d %s, want 429 %s", tc.action, rec.Code, rec.Body, tc.typ)
		}
		if ra := rec.Header().Get("Retry-After"); tc.retryAfter {
			if n, err := strconv.Atoi(ra); err != nil || n < 1 || n > 60 {
				t.Errorf("%s: Retry-After %q, want 1..60 seconds", tc.action, ra)
			}
		} else if ra != "" {
			t.Errorf("%s: Retry-After %q on a refusal that is not a rate limit", tc.action, ra)
		}
		if after, _ := a.store.Head(ctx); after != head {
			t.Errorf("%s: the refused request appended %d events", tc.action, after-head)
		}
		// The retry of a recorded request is answered, not refused.
		if rec := post(tc.action, fmt.Sprintf("k-%d-0", i)); rec.Code != http.StatusAccepted || rec.Header().Get("Idempotent-Replayed") != "true" {
			t.Errorf("%s: a replayed request got %d %s", tc.action, rec.Code, rec.Body)
		}
	}
	// Other actions are not affected.
	if rec := post("demo", ""); rec.Code != http.StatusAccepted {
		t.Errorf("another action: %d %s", rec.Code, rec.Body)
	}
}

// waitQueued waits until the read model shows n executions waiting for action.
func waitQueued(t *testing.T, a *testAPI, action string, n int) {
	t.Helper()
	waitfor.That(t, fmt.Sprintf("the read model to show %d waiting for %s", n, action), func() bool {
		rec := httptest.NewRecorder()
		a.srv.Handler().ServeHTTP(rec, request("GET", "/api/v1/actions/"+action+"/queue-stats", "", ""))
		var st struct {
			QueueLength int `json:"queue_length"`
		}
		err := json.Unmarshal(rec.Body.Bytes(), &st)
		return err == nil && st.QueueLength == n
	})
}
