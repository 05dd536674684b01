package domain_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/internal/valuediff"
)

func TestPolicyWithDefaults(t *testing.T) {
	t.Parallel()
	got := domain.Policy{Ref: "a", Runner: "r"}.WithDefaults()
	want := domain.Policy{
		Ref: "a", Runner: "r", MaxConcurrent: domain.DefaultMaxConcurrent, MaxQueueLength: domain.DefaultMaxQueueLength,
		TimeoutSeconds: domain.DefaultTimeoutSeconds, ScheduledTimeoutSeconds: domain.DefaultScheduledTimeoutSecs,
		MaxAttempts: domain.DefaultMaxAttempts, OnLimit: domain.OnLimitQueue,
	}
	if d := valuediff.Diff(got, want); d != "" {
		t.Fatalf("WithDefaults() = %+v, want %+v (%s)", got, want, d)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	// Set fields are kept, including the ones Validate will refuse.
	set := domain.Policy{
		Ref: "a", Runner: "r", MaxConcurrent: 7, MaxQueueLength: -1, QueueTimeoutSeconds: 2, TimeoutSeconds: math.NaN(),
		ScheduledTimeoutSeconds: -3, MaxAttempts: 9, RateLimit: &domain.RateLimit{Count: 1, PerSeconds: 1},
		ConcurrencyKey: "k", OnLimit: domain.OnLimitReject,
	}
	kept := set.WithDefaults()
	if kept.MaxConcurrent != 7 || kept.MaxQueueLength != -1 || kept.QueueTimeoutSeconds != 2 || !math.IsNaN(kept.TimeoutSeconds) ||
		kept.ScheduledTimeoutSeconds != -3 || kept.MaxAttempts != 9 || kept.RateLimit != set.RateLimit || kept.ConcurrencyKey != "k" ||
		kept.OnLimit != domain.OnLimitReject {
		t.Fatalf("WithDefaults changed set fields: %+v", kept)
	}
	if (domain.Policy{}).WithDefaults().QueueTimeoutSeconds != 0 {
		t.Error("queue timeout must stay 0 (wait forever)")
	}
	if p := got; p.Timeout() != time.Hour || p.ScheduledTimeout() != 5*time.Minute || p.QueueTimeout() != 0 {
		t.Errorf("durations %v %v %v", p.Timeout(), p.ScheduledTimeout(), p.QueueTimeout())
	}
	if d := (domain.Policy{TimeoutSeconds: 1.5}).Timeout(); d != 1500*time.Millisecond {
		t.Errorf("Timeout of 1.5s = %v", d)
	}
}

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	base := func() domain.Policy { return domain.Policy{Ref: "a", Runner: "core.noop"}.WithDefaults() }
	long := strings.Repeat("a", domain.MaxRefLen)
	tests := []struct {
		name string
		edit func(*domain.Policy)
		ok   bool
	}{
		{"defaults", func(*domain.Policy) {}, true},
		{"ref empty", func(p *domain.Policy) { p.Ref = "" }, false},
		{"ref max length", func(p *domain.Policy) { p.Ref = long }, true},
		{"ref too long", func(p *domain.Policy) { p.Ref = long + "a" }, false},
		{"ref with slash", func(p *domain.Policy) { p.Ref = "a/b" }, false},
		{"ref starting with dash", func(p *domain.Policy) { p.Ref = "-a" }, false},
		{"ref with dots, dashes, underscores", func(p *domain.Policy) { p.Ref = "A9._-z" }, true},
		{"ref non-ASCII", func(p *domain.Policy) { p.Ref = "café" }, false},
		{"runner empty", func(p *domain.Policy) { p.Runner = "" }, false},
		{"runner too long", func(p *domain.Policy) { p.Runner = long + "a" }, false},
		{"runner with space", func(p *domain.Policy) { p.Runner = "core noop" }, false},
		{"max_concurrent 0", func(p *domain.Policy) { p.MaxConcurrent = 0 }, false},
		{"max_concurrent negative", func(p *domain.Policy) { p.MaxConcurrent = -1 }, false},
		{"max_concurrent 1", func(p *domain.Policy) { p.MaxConcurrent = 1 }, true},
		{"max_concurrent at limit", func(p *domain.Policy) { p.MaxConcurrent = domain.MaxConcurrentLimit }, true},
		{"max_concurrent over limit", func(p *domain.Policy) { p.MaxConcurrent = domain.MaxConcurrentLimit + 1 }, false},
		{"max_queue_length 0", func(p *domain.Policy) { p.MaxQueueLength = 0 }, false},
		{"max_queue_length 1", func(p *domain.Policy) { p.MaxQueueLength = 1 }, true},
		{"max_queue_length at limit", func(p *domain.Policy) { p.MaxQueueLength = domain.MaxQueueLengthLimit }, true},
		{"max_queue_length over limit", func(p *domain.Policy) { p.MaxQueueLength = domain.MaxQueueLengthLimit + 1 }, false},
		{"queue_timeout 0 (forever)", func(p *domain.Policy) { p.QueueTimeoutSeconds = 0 }, true},
		{"queue_timeout fraction", func(p *domain.Policy) { p.QueueTimeoutSeconds = 0.25 }, true},
		{"queue_timeout negative", func(p *domain.Policy) { p.QueueTimeoutSeconds = -1 }, false},
		{"queue_timeout NaN", func(p *domain.Policy) { p.QueueTimeoutSeconds = math.NaN() }, false},
		{"queue_timeout +Inf", func(p *domain.Policy) { p.QueueTimeoutSeconds = math.Inf(1) }, false},
		{"queue_timeout at limit", func(p *domain.Policy) { p.QueueTimeoutSeconds = domain.MaxTimeoutSeconds }, true},
		{"queue_timeout over limit", func(p *domain.Policy) { p.QueueTimeoutSeconds = domain.MaxTimeoutSeconds + 0.5 }, false},
		{"timeout 0", func(p *domain.Policy) { p.TimeoutSeconds = 0 }, false},
		{"timeout negative", func(p *domain.Policy) { p.TimeoutSeconds = -0.1 }, false},
		{"timeout NaN", func(p *domain.Policy) { p.TimeoutSeconds = math.NaN() }, false},
		{"timeout -Inf", func(p *domain.Policy) { p.TimeoutSeconds = math.Inf(-1) }, false},
		{"timeout tiny", func(p *domain.Policy) { p.TimeoutSeconds = 0.001 }, true},
		{"timeout at limit", func(p *domain.Policy) { p.TimeoutSeconds = domain.MaxTimeoutSeconds }, true},
		{"timeout over limit", func(p *domain.Policy) { p.TimeoutSeconds = domain.MaxTimeoutSeconds + 1 }, false},
		{"scheduled_timeout 0", func(p *domain.Policy) { p.ScheduledTimeoutSeconds = 0 }, false},
		{"scheduled_timeout negative", func(p *domain.Policy) { p.ScheduledTimeoutSeconds = -5 }, false},
		{"scheduled_timeout NaN", func(p *domain.Policy) { p.ScheduledTimeoutSeconds = math.NaN() }, false},
		{"scheduled_timeout at limit", func(p *domain.Policy) { p.ScheduledTimeoutSeconds = domain.MaxTimeoutSeconds }, true},
		{"scheduled_timeout over limit", func(p *domain.Policy) { p.ScheduledTimeoutSeconds = domain.MaxTimeoutSeconds * 2 }, false},
		{"max_attempts 0", func(p *domain.Policy) { p.MaxAttempts = 0 }, false},
		{"max_attempts negative", func(p *domain.Policy) { p.MaxAttempts = -2 }, false},
		{"max_attempts 1", func(p *domain.Policy) { p.MaxAttempts = 1 }, true},
		{"max_attempts at limit", func(p *domain.Policy) { p.MaxAttempts = domain.MaxAttemptsLimit }, true},
		{"max_attempts over limit", func(p *domain.Policy) { p.MaxAttempts = domain.MaxAttemptsLimit + 1 }, false},
		{"rate limit ok", func(p *domain.Policy) { p.RateLimit = &domain.RateLimit{Count: 5, PerSeconds: 1} }, true},
		{"rate limit bounds", func(p *domain.Policy) { p.RateLimit = &domain.RateLimit{Count: 1_000_000, PerSeconds: 86400} }, true},
		{"rate limit count 0", func(p *domain.Policy) { p.RateLimit = &domain.RateLimit{Count: 0, PerSeconds: 1} }, false},
		{"rate limit count over", func(p *domain.Policy) { p.RateLimit = &domain.RateLimit{Count: 1_000_001, PerSeconds: 1} }, false},
		{"rate limit window 0", func(p *domain.Policy) { p.RateLimit = &domain.RateLimit{Count: 1} }, false},
		{"rate limit window negative", func(p *domain.Policy) { p.RateLimit = &domain.RateLimit{Count: 1, PerSeconds: -1} }, false},
		{"rate limit window NaN", func(p *domain.Policy) { p.RateLimit = &domain.RateLimit{Count: 1, PerSeconds: math.NaN()} }, false},
		{"rate limit window +Inf", func(p *domain.Policy) { p.RateLimit = &domain.RateLimit{Count: 1, PerSeconds: math.Inf(1)} }, false},
		{"rate limit window over a day", func(p *domain.Policy) { p.RateLimit = &domain.RateLimit{Count: 1, PerSeconds: 86401} }, false},
		{"concurrency key at max length", func(p *domain.Policy) { p.ConcurrencyKey = long }, true},
		{"concurrency key too long", func(p *domain.Policy) { p.ConcurrencyKey = long + "k" }, false},
		{"on_limit reject", func(p *domain.Policy) { p.OnLimit = domain.OnLimitReject }, true},
		{"on_limit empty", func(p *domain.Policy) { p.OnLimit = "" }, false},
		{"on_limit unknown", func(p *domain.Policy) { p.OnLimit = "drop" }, false},
		{"on_limit wrong case", func(p *domain.Policy) { p.OnLimit = "Queue" }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := base()
			tc.edit(&p)
			err := p.Validate()
			if tc.ok && err != nil {
				t.Fatalf("Validate(%+v): %v", p, err)
			}
			if !tc.ok && !errors.Is(err, domain.ErrInvalidPolicy) {
				t.Fatalf("Validate(%+v) = %v, want ErrInvalidPolicy", p, err)
			}
		})
	}
}

func TestValidateRefClipsLongInput(t *testing.T) {
	t.Parallel()
	err := domain.ValidateRef(strings.Repeat("x", 10_000))
	if !errors.Is(err, domain.ErrInvalidPolicy) || len(err.Error()) > 400 {
		t.Fatalf("ValidateRef of a huge ref: %d-byte error %v", len(err.Error()), err)
	}
}

// actionLog applies action events at consecutive versions.
type actionLog struct {
	t *testing.T
	a *domain.Action
	v uint64
}

func (l *actionLog) must(ev domain.Event, err error) {
	l.t.Helper()
	if err != nil || ev == nil {
		l.t.Fatalf("command gave %v, %v; want an event", ev, err)
	}
	l.a.Apply(ev, l.v)
	l.v++
}

func TestActionDefine(t *testing.T) {
	t.Parallel()
	a := domain.NewAction()
	if a.Defined() || a.Version() != -1 {
		t.Fatalf("new action: defined %v version %d", a.Defined(), a.Version())
	}
	if _, err := a.Define(domain.Policy{Ref: "a"}); !errors.Is(err, domain.ErrInvalidPolicy) {
		t.Fatalf("Define without a runner = %v, want ErrInvalidPolicy", err)
	}
	p := domain.Policy{Ref: "a", Runner: "core.noop", MaxConcurrent: 2, RateLimit: &domain.RateLimit{Count: 3, PerSeconds: 1}}
	ev, err := a.Define(p)
	if err != nil {
		t.Fatal(err)
	}
	def, ok := ev.(domain.ActionDefined)
	if !ok || def.Policy.MaxQueueLength != domain.DefaultMaxQueueLength || def.Policy.MaxConcurrent != 2 {
		t.Fatalf("Define = %#v, want ActionDefined with defaults applied", ev)
	}
	l := &actionLog{t: t, a: a}
	l.must(ev, err)
	if !a.Defined() || a.Version() != 0 || valuediff.Diff(a.Policy(), def.Policy) != "" {
		t.Fatalf("after define: defined %v version %d policy %+v", a.Defined(), a.Version(), a.Policy())
	}

	// The same policy again, written with or without its defaults and with
	// an equal but distinct rate limit value: an idempotent repeat.
	same := p
	same.RateLimit = &domain.RateLimit{Count: 3, PerSeconds: 1}
	for _, q := range []domain.Policy{p, same, def.Policy} {
		if ev, err := a.Define(q); ev != nil || err != nil {
			t.Errorf("Define(%+v) again = %v, %v; want nil, nil", q, ev, err)
		}
	}
	// A different policy conflicts.
	for _, edit := range []func(*domain.Policy){
		func(q *domain.Policy) { q.MaxConcurrent = 3 },
		func(q *domain.Policy) { q.RateLimit = nil },
		func(q *domain.Policy) { q.RateLimit = &domain.RateLimit{Count: 4, PerSeconds: 1} },
		func(q *domain.Policy) { q.Runner = "core.echo" },
	} {
		q := p
		edit(&q)
		if _, err := a.Define(q); !errors.Is(err, domain.ErrConflict) {
			t.Errorf("Define(%+v) = %v, want ErrConflict", q, err)
		}
	}
	// Validation comes before the comparison.
	if _, err := a.Define(domain.Policy{Ref: "a", Runner: "core.noop", MaxAttempts: -1}); !errors.Is(err, domain.ErrInvalidPolicy) {
		t.Errorf("invalid redefinition = %v, want ErrInvalidPolicy", err)
	}
}

func TestActionChangePauseResume(t *testing.T) {
	t.Parallel()
	a := domain.NewAction()
	p := domain.Policy{Ref: "a", Runner: "core.noop"}
	for name, cmd := range map[string]func() (domain.Event, error){
		"change": func() (domain.Event, error) { return a.ChangePolicy(p) },
		"pause":  func() (domain.Event, error) { return a.Pause("x") },
		"resume": a.Resume,
	} {
		if ev, err := cmd(); ev != nil || !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("%s of an undefined action = %v, %v; want ErrNotFound", name, ev, err)
		}
	}
	l := &actionLog{t: t, a: a}
	l.must(a.Define(p))

	// ChangePolicy: nil when nothing changes, refused when invalid or renamed.
	if ev, err := a.ChangePolicy(p); ev != nil || err != nil {
		t.Errorf("ChangePolicy to the same policy = %v, %v; want nil, nil", ev, err)
	}
	if _, err := a.ChangePolicy(domain.Policy{Ref: "b", Runner: "core.noop"}); !errors.Is(err, domain.ErrInvalidPolicy) {
		t.Errorf("ChangePolicy renaming the action = %v, want ErrInvalidPolicy", err)
	}
	if _, err := a.ChangePolicy(domain.Policy{Ref: "a", Runner: "core.noop", OnLimit: "drop"}); !errors.Is(err, domain.ErrInvalidPolicy) {
		t.Errorf("ChangePolicy to an invalid policy = %v, want ErrInvalidPolicy", err)
	}
	q := p
	q.MaxConcurrent = 5
	ev, err := a.ChangePolicy(q)
	if c, ok := ev.(domain.ActionPolicyChanged); err != nil || !ok || c.Policy.MaxConcurrent != 5 || c.Policy.MaxAttempts != domain.DefaultMaxAttempts {
		t.Fatalf("ChangePolicy = %#v, %v", ev, err)
	}
	l.must(ev, err)
	if a.Policy().MaxConcurrent != 5 || a.Version() != 1 {
		t.Fatalf("after the change: %+v version %d", a.Policy(), a.Version())
	}
	// Once changed, defining the original policy again is a conflict.
	if _, err := a.Define(p); !errors.Is(err, domain.ErrConflict) {
		t.Errorf("Define of the old policy after a change = %v, want ErrConflict", err)
	}

	// Pause and resume are idempotent.
	if ev, err := a.Resume(); ev != nil || err != nil {
		t.Errorf("Resume when running = %v, %v; want nil, nil", ev, err)
	}
	ev, err = a.Pause("maintenance")
	if ev != (domain.ActionPaused{Reason: "maintenance"}) || err != nil {
		t.Fatalf("Pause = %#v, %v", ev, err)
	}
	l.must(ev, err)
	if !a.Paused() {
		t.Fatal("not paused after ActionPaused")
	}
	if ev, err := a.Pause("again"); ev != nil || err != nil {
		t.Errorf("Pause when paused = %v, %v; want nil, nil", ev, err)
	}
	ev, err = a.Resume()
	if ev != (domain.ActionResumed{}) || err != nil {
		t.Fatalf("Resume = %#v, %v", ev, err)
	}
	l.must(ev, err)
	if a.Paused() || a.Version() != 3 {
		t.Fatalf("after resume: paused %v version %d", a.Paused(), a.Version())
	}
}
