package domain_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
)

// TestPolicyRunnerConfig: runner_config is an object kept in one normal
// form, so a repeat definition and the log's copy compare equal; it reaches
// the handoff.
func TestPolicyRunnerConfig(t *testing.T) {
	t.Parallel()
	p := domain.Policy{Ref: "a", Runner: "core.shell",
		RunnerConfig: json.RawMessage(" {\"command\" : \"/bin/echo\", \"args\":[\"<x>\"], \"n\": 1.50} ")}.WithDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	const normal = `{"args":["\u003cx\u003e"],"command":"/bin/echo","n":1.50}`
	if string(p.RunnerConfig) != normal {
		t.Fatalf("normal form %s, want %s", p.RunnerConfig, normal)
	}
	// Through the log (JSON) and back: the same policy.
	b, _ := json.Marshal(domain.ActionDefined{Policy: p})
	var back domain.ActionDefined
	if err := json.Unmarshal(b, &back); err != nil || string(back.Policy.RunnerConfig) != normal {
		t.Fatalf("read back %s, %v", back.Policy.RunnerConfig, err)
	}
	a := domain.NewAction()
	ev, err := a.Define(p)
	if err != nil {
		t.Fatal(err)
	}
	a.Apply(ev, 0)
	again := p
	again.RunnerConfig = json.RawMessage(`{"n":1.50,"command":"/bin/echo","args":["<x>"]}`)
	if ev, err := a.Define(again); ev != nil || err != nil {
		t.Fatalf("the same config in another order: %v, %v; want an idempotent repeat", ev, err)
	}
	other := p
	other.RunnerConfig = json.RawMessage(`{"command":"/bin/sh"}`)
	if _, err := a.Define(other); !errors.Is(err, domain.ErrConflict) {
		t.Fatalf("another config: %v, want ErrConflict", err)
	}
	if null := (domain.Policy{Ref: "a", Runner: "r", RunnerConfig: json.RawMessage(" null ")}).WithDefaults(); null.RunnerConfig != nil {
		t.Fatalf("null config kept as %s", null.RunnerConfig)
	}

	for _, bad := range []string{`[1]`, `"x"`, `1`, `{"a":`, `{} {}`, `{"a":"` + strings.Repeat("x", domain.MaxRunnerConfigLen) + `"}`} {
		p := domain.Policy{Ref: "a", Runner: "r", RunnerConfig: json.RawMessage(bad)}.WithDefaults()
		if err := p.Validate(); !errors.Is(err, domain.ErrInvalidPolicy) || !strings.Contains(err.Error(), "runner_config") {
			t.Errorf("runner_config %.40s: %v, want ErrInvalidPolicy", bad, err)
		}
	}

	x := domain.NewExecution("e1")
	req, err := x.Request(domain.ExecutionRequested{Action: "a"})
	if err != nil {
		t.Fatal(err)
	}
	x.Apply(req, 0, time.Time{})
	g, err := x.Grant("")
	if err != nil {
		t.Fatal(err)
	}
	x.Apply(g, 1, time.Time{})
	sched, err := x.Schedule("w1", "w1-a", p)
	if err != nil || string(sched.RunnerConfig) != normal {
		t.Fatalf("handoff runner_config %s, %v; want %s", sched.RunnerConfig, err, normal)
	}
}
