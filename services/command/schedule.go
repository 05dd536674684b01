package command

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/repository"
)

// ErrUnknownSchedule: no schedule has that ref (404). It wraps domain.ErrNotFound.
var ErrUnknownSchedule = fmt.Errorf("unknown schedule: %w", domain.ErrNotFound)

// Schedule is a client's schedule definition.
type Schedule struct {
	Ref      string
	Action   string
	Cron     string
	Timezone string
	Input    []byte
}

// LoadSchedule folds schedule ref's stream (a zero Schedule if it does not exist).
func (c *Service) LoadSchedule(ctx context.Context, ref string) (*domain.Schedule, error) {
	s := &domain.Schedule{}
	base := func(st *projections.State) int64 { // its start was archived
		if b := st.Schedules[ref]; b != nil {
			c := *b
			s = &c
			return int64(s.Version)
		}
		return -1
	}
	if _, err := repository.FoldFromBase(ctx, c.Store, &c.bases, domain.ScheduleStream(ref), base, func(env *domain.Envelope, ev domain.Event) { s.Apply(ev, env.Version, env.Time) }); err != nil {
		return nil, fmt.Errorf("load schedule %s: %w", ref, err)
	}
	return s, nil
}

// DefineSchedule writes schedule.defined. Bad input fails with
// ErrInvalidRequest and writes nothing: a ref that is not an action-style
// ref, a cron expression that does not parse (the message says where), an
// unknown timezone, a cron that never fires (February 30th), input that is not a JSON object, an action that is not
// defined, input that the action's built-in runner would refuse at every tick. created is false when the same definition exists; a different
// one fails with domain.ErrConflict.
func (c *Service) DefineSchedule(ctx context.Context, d Schedule) (created bool, err error) {
	if err := domain.ValidateRef(d.Ref); err != nil {
		return false, fmt.Errorf("%w: schedule %v", ErrInvalidRequest, err)
	}
	sched, err := domain.ParseCron(d.Cron, d.Timezone)
	if err != nil {
		return false, err
	}
	if sched.Next(time.Now()).IsZero() {
		return false, fmt.Errorf("%w: cron %q never fires (no time in the next five years matches it)", ErrInvalidRequest, d.Cron)
	}
	if in := bytes.TrimSpace(d.Input); len(in) > 0 && in[0] != '{' {
		return false, fmt.Errorf("%w: input must be a JSON object", ErrInvalidRequest)
	}
	if err := domain.ValidateRef(d.Action); err != nil {
		return false, fmt.Errorf("%w: action %q is not defined", ErrInvalidRequest, d.Action)
	}
	a, err := c.LoadAction(ctx, d.Action)
	if err != nil {
		return false, err
	}
	if !a.Defined() {
		return false, fmt.Errorf("%w: action %q is not defined", ErrInvalidRequest, d.Action)
	}
	if err := c.checkInput(ctx, Request{Action: d.Action, Input: compactJSON(d.Input)}); err != nil {
		return false, fmt.Errorf("every tick's input: %w", err)
	}
	def := domain.ScheduleDefined{Action: d.Action, Cron: d.Cron, Timezone: d.Timezone, Input: compactJSON(d.Input)}
	return c.updateSchedule(ctx, d.Ref, func(s *domain.Schedule) (domain.Event, error) { return s.Define(def) })
}

// PauseSchedule, ResumeSchedule and DeleteSchedule change a schedule;
// wrote is false when there was nothing to change. An unknown (or deleted)
// schedule fails with ErrUnknownSchedule.
func (c *Service) PauseSchedule(ctx context.Context, ref string) (bool, error) {
	return c.updateSchedule(ctx, ref, (*domain.Schedule).Pause)
}

func (c *Service) ResumeSchedule(ctx context.Context, ref string) (bool, error) {
	return c.updateSchedule(ctx, ref, (*domain.Schedule).Resume)
}

func (c *Service) DeleteSchedule(ctx context.Context, ref string) (bool, error) {
	return c.updateSchedule(ctx, ref, (*domain.Schedule).Delete)
}

func (c *Service) updateSchedule(ctx context.Context, ref string, decide func(*domain.Schedule) (domain.Event, error)) (bool, error) {
	if err := domain.ValidateRef(ref); err != nil {
		return false, fmt.Errorf("schedule %q: %w", ref, ErrUnknownSchedule)
	}
	stream := domain.ScheduleStream(ref)
	for attempt := 0; ; attempt++ {
		s, err := c.LoadSchedule(ctx, ref)
		if err != nil {
			return false, err
		}
		ev, err := decide(s)
		if errors.Is(err, domain.ErrNotFound) {
			return false, fmt.Errorf("schedule %q: %w", ref, ErrUnknownSchedule)
		}
		if err != nil || ev == nil {
			return false, err
		}
		env, err := codec.Events.Encode(c.freshID(), ev, domain.OwnerAPI, c.Writer)
		if err != nil {
			return false, err
		}
		env.Metadata = domain.PrincipalMetadata(repository.PrincipalFrom(ctx))
		expected := eventstore.NoStream
		if s.Defined {
			expected = eventstore.Exact(s.Version)
		}
		_, err = c.Store.Append(ctx, stream, expected, env)
		if err == nil {
			return true, nil
		}
		if !repository.LostRace(err) || attempt >= repository.MaxRetries {
			return false, fmt.Errorf("append %s to %s: %w", ev.EventType(), stream, err)
		}
	}
}

// ScheduleTick is one tick of a schedule and the id of the execution it requests.
type ScheduleTick struct {
	At        time.Time
	Execution string
}

// RecentTicks lists up to n of s's ticks up to now, latest first, each with
// its execution's id (domain.ScheduleTickID); whether the execution exists
// is the reader's to look up.
func RecentTicks(ref string, s *domain.Schedule, now time.Time, n int) []ScheduleTick {
	var out []ScheduleTick
	for _, t := range s.Recent(now, n) {
		out = append(out, ScheduleTick{At: t, Execution: domain.ScheduleTickID(ref, t)})
	}
	return out
}
