package domain_test

import (
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
)

// TestScheduleDue: the latest tick after since and the last tick, not
// later than now; nothing while paused or deleted; a resume skips the
// ticks while paused; the cron is read in its timezone.
func TestScheduleDue(t *testing.T) {
	at := time.Date(2026, 3, 1, 0, 0, 30, 0, time.UTC)
	s := &domain.Schedule{}
	s.Apply(domain.ScheduleDefined{Action: "a", Cron: "0 2 * * *", Timezone: "Asia/Tokyo"}, 0, at) // 02:00 JST = 17:00 UTC
	if _, ok := s.Due(at.Add(16*time.Hour), 100); ok {
		t.Fatal("due before its first tick")
	}
	tick, ok := s.Due(at.Add(3*24*time.Hour), 100) // three ticks missed: the latest
	if want := time.Date(2026, 3, 3, 17, 0, 0, 0, time.UTC); !ok || !tick.Equal(want) {
		t.Fatalf("due %v %v, want %v", tick, ok, want)
	}
	s.NoteTick(tick)
	if _, ok := s.Due(at.Add(3*24*time.Hour), 100); ok {
		t.Fatal("a noted tick due again")
	}
	s.Apply(domain.SchedulePaused{}, 1, at)
	if _, ok := s.Due(at.Add(5*24*time.Hour), 100); ok {
		t.Fatal("due while paused")
	}
	resumed := at.Add(5 * 24 * time.Hour)
	s.Apply(domain.ScheduleResumed{}, 2, resumed)
	if _, ok := s.Due(resumed.Add(time.Hour), 100); ok {
		t.Fatal("a tick while paused caught up after the resume")
	}
	s.Apply(domain.ScheduleDeleted{}, 3, resumed)
	if _, ok := s.Due(resumed.Add(48*time.Hour), 100); ok {
		t.Fatal("due after the deletion")
	}
	if domain.ScheduleTickID("a", tick) != domain.ScheduleTickID("a", tick.In(time.Local)) || domain.ScheduleTickID("a", tick) == domain.ScheduleTickID("b", tick) {
		t.Fatal("tick ids not derived from (ref, tick)")
	}
}

// BenchmarkScheduleDue: one schedule's decision on a timed cycle (nothing due).
func BenchmarkScheduleDue(b *testing.B) {
	at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	s := &domain.Schedule{}
	s.Apply(domain.ScheduleDefined{Action: "a", Cron: "*/5 * * * *"}, 0, at)
	s.NoteTick(at.Add(10 * time.Minute))
	now := at.Add(12 * time.Minute)
	for b.Loop() {
		s.Due(now, 100_000)
	}
}
