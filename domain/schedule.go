package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/robfig/cron/v3"
)

// Cron schedules: a schedule-<ref> stream, written by the API (defined,
// paused, resumed, deleted); its ticks are requested by the active executor
// as plain executions whose ids derive from (ref, tick time), so a tick is
// requested at most once whoever requests it and however often.

// Schedule event names and stream category.
const (
	TypeScheduleDefined = "schedule.defined"
	TypeSchedulePaused  = "schedule.paused"
	TypeScheduleResumed = "schedule.resumed"
	TypeScheduleDeleted = "schedule.deleted"

	StreamSchedule = "schedule"
)

// ScheduleStream names a schedule's stream.
func ScheduleStream(ref string) string { return StreamSchedule + "-" + ref }

// ScheduleDefined creates (or, after a deletion, recreates) a schedule.
type ScheduleDefined struct {
	Action   string          `json:"action"`
	Cron     string          `json:"cron"`
	Timezone string          `json:"timezone,omitempty"` // IANA name; empty: UTC
	Input    json.RawMessage `json:"input,omitempty"`
}

// SchedulePaused stops a schedule's ticks; ticks while paused are never requested.
type SchedulePaused struct{}

// ScheduleResumed starts the ticks again, from the resume's log time on.
type ScheduleResumed struct{}

// ScheduleDeleted ends the schedule: no tick after it is requested.
type ScheduleDeleted struct{}

func (ScheduleDefined) EventType() string { return TypeScheduleDefined }
func (SchedulePaused) EventType() string  { return TypeSchedulePaused }
func (ScheduleResumed) EventType() string { return TypeScheduleResumed }
func (ScheduleDeleted) EventType() string { return TypeScheduleDeleted }

// cronParser reads standard five-field cron, or six fields with seconds
// first, and the descriptors (@daily, @every 1h, …).
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseCron parses expr in timezone tz (an IANA name; empty: UTC). expr may
// name its zone itself with a CRON_TZ= (or TZ=) prefix, as a crontab line
// does, when tz is empty; a zone in both is refused, naming both. A bad
// expression or an unknown zone fails with ErrInvalidRequest, saying which
// field is wrong (the parser's message).
func ParseCron(expr, tz string) (cron.Schedule, error) {
	if len(expr) > 200 {
		return nil, fmt.Errorf("%w: cron %q: longer than 200 bytes", ErrInvalidRequest, clip(expr))
	}
	spec := expr
	if zone, rest, ok := cronZone(expr); ok {
		if tz != "" {
			return nil, fmt.Errorf("%w: cron %q names the zone %q and timezone names %q: give the zone once (timezone, or the cron's CRON_TZ= prefix)",
				ErrInvalidRequest, clip(expr), clip(zone), clip(tz))
		}
		if rest == "" {
			return nil, fmt.Errorf("%w: cron %q: no schedule after the zone", ErrInvalidRequest, clip(expr))
		}
		spec, tz = rest, zone
	}
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil || tz == "Local" {
			return nil, fmt.Errorf("%w: unknown timezone %q", ErrInvalidRequest, clip(tz))
		}
		loc = l
	}
	s, err := cronParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: cron %q does not parse: %v", ErrInvalidRequest, clip(expr), err)
	}
	if ss, ok := s.(*cron.SpecSchedule); ok {
		ss.Location = loc
	}
	return s, nil
}

// cronZone splits a CRON_TZ= or TZ= prefix off expr: the zone it names and
// the schedule after it. (The cron parser's own reading of the prefix
// panics on a prefix with nothing after it, and ParseCron sets the zone
// itself after parsing, which would override it.)
func cronZone(expr string) (zone, rest string, ok bool) {
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if after, found := strings.CutPrefix(expr, p); found {
			zone, rest, _ = strings.Cut(after, " ")
			return zone, strings.TrimSpace(rest), true
		}
	}
	return "", expr, false
}

// scheduleOf is the schedule of a definition in the log. One written before
// ParseCron refused a zone in both its cron and its timezone is read as it
// was then: the timezone wins.
func scheduleOf(d ScheduleDefined) (cron.Schedule, error) {
	if _, rest, ok := cronZone(d.Cron); ok && d.Timezone != "" {
		return ParseCron(rest, d.Timezone)
	}
	return ParseCron(d.Cron, d.Timezone)
}

// scheduleNS derives tick execution ids.
var scheduleNS = uuid.MustParse("5c0e5a9e-2f43-4b35-9a51-3b8d0c8f7a11")

// FormatTick is a tick's time as recorded (RFC 3339, UTC, to the second).
func FormatTick(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// ScheduleTickID is the execution id of schedule ref's tick at t: the same
// for every writer, so a second request of a tick is an idempotent no-op.
func ScheduleTickID(ref string, t time.Time) string {
	return DeriveID(scheduleNS, []byte(ref+"\x00"+FormatTick(t))).String()
}

// Schedule is one schedule's state, folded from its stream (and, for
// LastTick, from the executions its ticks requested).
type Schedule struct {
	Def      ScheduleDefined
	Exists   bool      // defined and not deleted
	Paused   bool      //
	Since    time.Time // log time of the last define or resume: ticks at or before it are not due
	LastTick time.Time // the latest tick whose execution the log holds
	Version  uint64    // of its stream's last event
	Defined  bool      // the stream has an event (Version is meaningful)
	sched    cron.Schedule
}

// Apply folds one event of the schedule's stream written at log time at.
func (s *Schedule) Apply(ev Event, version uint64, at time.Time) {
	s.Version, s.Defined = version, true
	switch e := ev.(type) {
	case ScheduleDefined:
		s.Def, s.Exists, s.Paused, s.Since, s.sched = e, true, false, at, nil
	case SchedulePaused:
		s.Paused = true
	case ScheduleResumed:
		s.Paused, s.Since = false, at
	case ScheduleDeleted:
		s.Exists, s.Paused = false, false
	}
}

// NoteTick records that the log holds the execution of the tick at t.
func (s *Schedule) NoteTick(t time.Time) {
	if t.After(s.LastTick) {
		s.LastTick = t
	}
}

// Define decides a definition: nil, nil if it exists with the same
// definition (nothing to write); ErrConflict if it exists with another.
func (s *Schedule) Define(d ScheduleDefined) (Event, error) {
	if s.Exists {
		if s.Def.Action == d.Action && s.Def.Cron == d.Cron && s.Def.Timezone == d.Timezone && bytes.Equal(compactRaw(s.Def.Input), compactRaw(d.Input)) {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: schedule exists with another definition (delete it first)", ErrConflict)
	}
	return d, nil
}

// Pause, Resume and Delete decide the change; nil, nil when there is nothing
// to change; ErrNotFound for a schedule that does not exist.
func (s *Schedule) Pause() (Event, error)  { return s.change(!s.Paused, SchedulePaused{}) }
func (s *Schedule) Resume() (Event, error) { return s.change(s.Paused, ScheduleResumed{}) }
func (s *Schedule) Delete() (Event, error) { return s.change(true, ScheduleDeleted{}) }

func (s *Schedule) change(needed bool, ev Event) (Event, error) {
	if !s.Exists {
		return nil, fmt.Errorf("schedule: %w", ErrNotFound)
	}
	if !needed {
		return nil, nil
	}
	return ev, nil
}

// Due returns the tick to request at now, if any: the latest tick after
// Since and after LastTick that is not later than now. Ticks missed before
// it (the executor was down) are skipped: one catch-up run, for the latest.
// Nothing is due for a paused or deleted schedule. At most limit ticks are
// stepped through (the caller's bound on work; the latest of those is due).
func (s *Schedule) Due(now time.Time, limit int) (time.Time, bool) {
	if !s.Exists || s.Paused {
		return time.Time{}, false
	}
	if s.sched == nil {
		sc, err := scheduleOf(s.Def)
		if err != nil {
			return time.Time{}, false // refused before it was written: does not happen
		}
		s.sched = sc
	}
	from := s.Since
	if s.LastTick.After(from) {
		from = s.LastTick
	}
	// far behind (a long stop): start a day before now, so a per-second
	// schedule does not step through every missed tick
	if day := now.Add(-24 * time.Hour); from.Before(day) {
		if n := s.sched.Next(day); !n.IsZero() && !n.After(now) {
			from = day
		}
	}
	t := s.sched.Next(from)
	if t.IsZero() || t.After(now) {
		return time.Time{}, false
	}
	for i := 0; i < limit; i++ {
		n := s.sched.Next(t)
		if n.IsZero() || n.After(now) {
			break
		}
		t = n
	}
	return t, true
}

// Recent returns up to n of the schedule's ticks not later than now and
// after its definition (or resume), latest first.
func (s *Schedule) Recent(now time.Time, n int) []time.Time {
	sc, err := scheduleOf(s.Def)
	if err != nil || n <= 0 {
		return nil
	}
	var ring []time.Time
	for _, w := range []time.Duration{time.Hour, 24 * time.Hour, 31 * 24 * time.Hour} {
		from := s.Since
		if f := now.Add(-w); from.Before(f) {
			from = f
		}
		ring = ring[:0]
		for t := sc.Next(from); !t.IsZero() && !t.After(now); t = sc.Next(t) {
			ring = append(ring, t)
			if len(ring) > n {
				ring = ring[1:]
			}
		}
		if len(ring) >= n || !from.After(s.Since) {
			break
		}
	}
	out := make([]time.Time, 0, len(ring))
	for i := len(ring) - 1; i >= 0; i-- {
		out = append(out, ring[i])
	}
	return out
}

func compactRaw(b json.RawMessage) []byte {
	var buf bytes.Buffer
	if len(b) == 0 || json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}
