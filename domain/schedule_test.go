package domain_test

import (
	"errors"
	"strings"
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

// TestCronZone: a cron may name its zone with a CRON_TZ= (or TZ=)
// prefix when timezone is empty, and then ticks there as with timezone; a
// zone in both is refused naming both (before, timezone silently won, and
// without timezone the prefix was overridden by UTC); a prefix with
// nothing after it is refused (the parser itself panics on it). A
// definition with both, written before the refusal, is read as then: the
// timezone wins.
func TestCronZone(t *testing.T) {
	from := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
	want := time.Date(2026, 1, 10, 8, 0, 0, 0, time.UTC) // 09:00 in Berlin (CET)
	for _, c := range []struct{ cron, tz string }{
		{"0 9 * * *", "Europe/Berlin"},
		{"CRON_TZ=Europe/Berlin 0 9 * * *", ""},
		{"TZ=Europe/Berlin 0 9 * * *", ""},
		{"CRON_TZ=Europe/Berlin   0 9 * * *", ""},
	} {
		sc, err := domain.ParseCron(c.cron, c.tz)
		if err != nil {
			t.Fatalf("%q in %q: %v", c.cron, c.tz, err)
		}
		if got := sc.Next(from); !got.Equal(want) {
			t.Errorf("%q in %q: next %v, want %v", c.cron, c.tz, got, want)
		}
	}
	for _, c := range []struct{ cron, tz string }{
		{"CRON_TZ=Europe/Berlin 0 9 * * *", "Asia/Tokyo"},
		{"TZ=Europe/Berlin 0 9 * * *", "Europe/Berlin"}, // the same zone twice: still one too many
		{"CRON_TZ=Europe/Berlin", ""},
		{"TZ=UTC", ""},
		{"CRON_TZ=Mars/Olympus 0 9 * * *", ""},
		{"CRON_TZ=Local 0 9 * * *", ""},
	} {
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%q in %q: panic %v", c.cron, c.tz, r)
				}
			}()
			_, err = domain.ParseCron(c.cron, c.tz)
		}()
		if !errors.Is(err, domain.ErrInvalidRequest) {
			t.Errorf("%q in %q: %v, want ErrInvalidRequest", c.cron, c.tz, err)
		}
		if c.tz != "" && err != nil && (!strings.Contains(err.Error(), "Europe/Berlin") || !strings.Contains(err.Error(), c.tz)) {
			t.Errorf("%q in %q: %v, want both zones named", c.cron, c.tz, err)
		}
	}
	s := &domain.Schedule{}
	s.Apply(domain.ScheduleDefined{Action: "a", Cron: "CRON_TZ=Europe/Berlin 0 9 * * *", Timezone: "Asia/Tokyo"}, 0, from)
	day := from.Add(24 * time.Hour)
	if tick, ok := s.Due(day.Add(time.Hour), 100); !ok || !tick.Equal(day) { // 09:00 in Tokyo = 00:00 UTC; in Berlin it would be 08:00
		t.Errorf("a logged definition with both zones: due %v %v, want %v (its timezone's)", tick, ok, day)
	}
}

// TestScheduleAcrossDaylightSaving pins what a tick in a daylight-saving
// transition does (docs/schedules.md), as robfig/cron
// computes it: in Europe/Berlin, 30 2 * * * has no tick on the day of the
// spring-forward gap (02:30 does not exist that night), and two on the day
// of the autumn overlap (02:30 CEST, then 02:30 CET an hour later), each
// its own execution. A schedule every hour stays one tick per real hour.
func TestScheduleAcrossDaylightSaving(t *testing.T) {
	utc := func(mo time.Month, d, h, m int) time.Time { return time.Date(2026, mo, d, h, m, 0, 0, time.UTC) }
	for _, c := range []struct {
		name, cron string
		from, to   time.Time
		want       []time.Time
	}{
		{"gap", "30 2 * * *", utc(3, 27, 12, 0), utc(3, 30, 12, 0), // 2026-03-29 02:00 CET → 03:00 CEST
			[]time.Time{utc(3, 28, 1, 30), utc(3, 30, 0, 30)}},
		{"overlap", "30 2 * * *", utc(10, 24, 12, 0), utc(10, 26, 12, 0), // 2026-10-25 03:00 CEST → 02:00 CET
			[]time.Time{utc(10, 25, 0, 30), utc(10, 25, 1, 30), utc(10, 26, 1, 30)}},
		{"gap, hourly", "30 * * * *", utc(3, 28, 23, 0), utc(3, 29, 3, 0),
			[]time.Time{utc(3, 28, 23, 30), utc(3, 29, 0, 30), utc(3, 29, 1, 30), utc(3, 29, 2, 30)}},
		{"overlap, hourly", "30 * * * *", utc(10, 24, 23, 0), utc(10, 25, 3, 0),
			[]time.Time{utc(10, 24, 23, 30), utc(10, 25, 0, 30), utc(10, 25, 1, 30), utc(10, 25, 2, 30)}},
	} {
		s := &domain.Schedule{}
		s.Apply(domain.ScheduleDefined{Action: "a", Cron: c.cron, Timezone: "Europe/Berlin"}, 0, c.from)
		var got []time.Time
		ids := map[string]bool{}
		for now := c.from; !now.After(c.to); now = now.Add(time.Minute) { // an executor's cycle, a minute apart
			if tick, ok := s.Due(now, 100); ok {
				got = append(got, tick)
				ids[domain.ScheduleTickID("s", tick)] = true
				s.NoteTick(tick)
			}
		}
		if len(got) != len(c.want) || len(ids) != len(got) {
			t.Errorf("%s: ticks %v (%d ids), want %v", c.name, got, len(ids), c.want)
			continue
		}
		for i := range got {
			if !got[i].Equal(c.want[i]) {
				t.Errorf("%s: ticks %v, want %v", c.name, got, c.want)
				break
			}
		}
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
