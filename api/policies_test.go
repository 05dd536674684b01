package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/wire"
)

// TestRetryPolicyInput: a bad retry policy is a 400 problem that names the
// field, and nothing is written; a good one is kept with its defaults
// filled in and shown back.
func TestRetryPolicyInput(t *testing.T) {
	e := newE2E(t)
	head, _ := e.store.Head(context.Background())
	for _, c := range []struct{ body, detail string }{
		{`{"ref":"r.a","runner":"core.fail","retry":{"max_attempts":0}}`, "retry.max_attempts 0"},
		{`{"ref":"r.a","runner":"core.fail","retry":{"max_attempts":101}}`, "retry.max_attempts 101"},
		{`{"ref":"r.a","runner":"core.fail","retry":{"max_attempts":3,"backoff_seconds":-1}}`, "retry.backoff_seconds -1"},
		{`{"ref":"r.a","runner":"core.fail","retry":{"max_attempts":3,"backoff_seconds":1e9}}`, "retry.backoff_seconds"},
		{`{"ref":"r.a","runner":"core.fail","retry":{"max_attempts":3,"backoff_multiplier":0.5}}`, "retry.backoff_multiplier 0.5"},
		{`{"ref":"r.a","runner":"core.fail","retry":{"max_attempts":3,"backoff_multiplier":1000}}`, "retry.backoff_multiplier 1000"},
		{`{"ref":"r.a","runner":"core.fail","retry":{"max_attempts":3,"backoff_seconds":10,"max_backoff_seconds":5}}`, "retry.max_backoff_seconds 5"},
		{`{"ref":"r.a","runner":"core.fail","retry":{"max_attempts":3,"jitter":true}}`, "jitter"},
		{`{"ref":"r.a","runner":"core.fail","retry":{"max_attempts":"3"}}`, "max_attempts"},
	} {
		st, h, b := e.do("POST", "/api/v1/actions", c.body)
		var p api.Problem
		if st != http.StatusBadRequest || json.Unmarshal(b, &p) != nil || h.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(p.Detail, c.detail) {
			t.Errorf("%s: %d %s, want 400 with a problem containing %q", c.body, st, b, c.detail)
		}
	}
	if after, _ := e.store.Head(context.Background()); after != head {
		t.Errorf("refused definitions appended %d events", after-head)
	}
	e.mustJSON("POST", "/api/v1/actions", map[string]any{"ref": "r.ok", "runner": "core.fail",
		"retry": map[string]any{"max_attempts": 4}}, http.StatusCreated, nil)
	var a wire.Action
	e.mustJSON("GET", "/api/v1/actions/r.ok", nil, http.StatusOK, &a)
	if r := a.Retry; r == nil || *r != (wire.Retry{MaxAttempts: 4, BackoffSeconds: 1, BackoffMultiplier: 2, MaxBackoffSeconds: 300}) {
		t.Fatalf("retry shown as %+v", a.Retry)
	}
}

// TestRequestTimingInput: a priority outside 1..4, run_at not RFC 3339, a
// negative or absurd delay, both run_at and delay, or any of them with
// with_items is a 400 problem saying which, and nothing is written; good
// ones are accepted.
func TestRequestTimingInput(t *testing.T) {
	e := newE2E(t)
	e.mustJSON("POST", "/api/v1/actions", map[string]any{"ref": "t.a", "runner": "core.noop"}, http.StatusCreated, nil)
	head, _ := e.store.Head(context.Background())
	for _, c := range []struct{ body, detail string }{
		{`{"action":"t.a","priority":5}`, "priority 5 must be 1..4"},
		{`{"action":"t.a","priority":-1}`, "priority -1 must be 1..4"},
		{`{"action":"t.a","priority":1.5}`, "priority"},
		{`{"action":"t.a","run_at":"tomorrow"}`, `run_at "tomorrow" is not an RFC 3339 time`},
		{`{"action":"t.a","run_at":"2026-01-02 15:04:05"}`, "not an RFC 3339 time"},
		{`{"action":"t.a","run_at":1767366245}`, "run_at"},
		{`{"action":"t.a","delay_seconds":-1}`, "delay_seconds -1 must be in"},
		{`{"action":"t.a","delay_seconds":1e12}`, "delay_seconds"},
		{`{"action":"t.a","delay_seconds":5,"run_at":"2026-01-02T15:04:05Z"}`, "not both"},
		{`{"action":"t.a","priority":1,"with_items":[1,2]}`, "not to with_items"},
	} {
		st, h, b := e.do("POST", "/api/v1/executions", c.body)
		var p api.Problem
		if st != http.StatusBadRequest || json.Unmarshal(b, &p) != nil || h.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(p.Detail, c.detail) {
			t.Errorf("%s: %d %s, want 400 with a problem containing %q", c.body, st, b, c.detail)
		}
	}
	if after, _ := e.store.Head(context.Background()); after != head {
		t.Errorf("refused requests appended %d events", after-head)
	}
	for _, body := range []string{`{"action":"t.a","priority":1}`, `{"action":"t.a","priority":4,"delay_seconds":0.5}`,
		`{"action":"t.a","run_at":"2026-01-02T15:04:05.5+02:00"}`} {
		if st, _, b := e.do("POST", "/api/v1/executions", body); st != http.StatusAccepted {
			t.Errorf("%s: %d %s, want 202", body, st, b)
		}
	}
}
