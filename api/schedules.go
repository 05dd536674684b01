package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/command"
)

// scheduleRoutes are the cron schedules' routes (see docs/schedules.md).
func (s *Server) scheduleRoutes() []Route {
	return []Route{
		{"createSchedule", "POST", "/api/v1/schedules", adminOnly, byBody, s.createSchedule},
		{"listSchedules", "GET", "/api/v1/schedules", readers, filtered, s.listSchedules},
		{"getSchedule", "GET", "/api/v1/schedules/{ref}", readers, bySchedule, s.getSchedule},
		{"deleteSchedule", "DELETE", "/api/v1/schedules/{ref}", adminOnly, bySchedule, s.deleteSchedule},
		{"pauseSchedule", "POST", "/api/v1/schedules/{ref}/pause", adminOnly, bySchedule, s.pauseSchedule},
		{"resumeSchedule", "POST", "/api/v1/schedules/{ref}/resume", adminOnly, bySchedule, s.resumeSchedule},
	}
}

func scheduleNotFound(ref string) *Problem {
	return typed(typeNotFound, http.StatusNotFound, "schedule %q is not defined", ref)
}

// recentTicks is how many ticks GET /api/v1/schedules/{ref} lists.
const recentTicks = 10

func scheduleOut(ref string, sc *domain.Schedule) wire.Schedule {
	out := wire.Schedule{Ref: ref, Action: sc.Def.Action, Cron: sc.Def.Cron, Input: sc.Def.Input,
		Timezone: sc.Def.Timezone, Paused: sc.Paused, Since: sc.Since}
	if out.Timezone == "" {
		out.Timezone = "UTC"
	}
	if !sc.LastTick.IsZero() {
		t := sc.LastTick
		out.LastTick = &t
	}
	return out
}

// loadedScheduleOut is scheduleOut of a schedule the command side loaded:
// its last tick is the read model's (or the base's it was folded from,
// whichever is later), since ticks are folded from executions and the
// schedule's own stream holds none. Every route answers the same last_tick.
func (s *Server) loadedScheduleOut(ref string, sc *domain.Schedule) wire.Schedule {
	if v, ok := s.cfg.Queries.Views().Schedule(ref); ok {
		sc.NoteTick(v.Schedule.LastTick)
	}
	return scheduleOut(ref, sc)
}

// createSchedule defines a schedule: 201 when new, 200 when the same
// definition exists, 409 when a different one does; bad input is a 400
// problem and nothing is written.
func (s *Server) createSchedule(w http.ResponseWriter, r *http.Request) {
	var body wire.ScheduleRequest
	prob := decodeJSON(w, r, s.cfg.MaxBodyBytes, &body, false)
	if prob == nil {
		prob = mayWrite(r, body.Action)
	}
	if prob != nil {
		writeProblem(w, prob)
		return
	}
	created, err := s.cfg.Commands.DefineSchedule(r.Context(), command.Schedule{Ref: body.Ref, Action: body.Action,
		Cron: body.Cron, Timezone: body.Timezone, Input: body.Input})
	if errors.Is(err, domain.ErrConflict) {
		writeProblem(w, typed(typeConflict, http.StatusConflict, "schedule %q is already defined differently; delete it first", clip(body.Ref)))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sc, err := s.cfg.Commands.LoadSchedule(r.Context(), body.Ref)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/api/v1/schedules/"+body.Ref)
	}
	writeJSON(w, status, s.loadedScheduleOut(body.Ref, sc))
}

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) {
	if p := queryOnly(r); p != nil {
		writeProblem(w, p)
		return
	}
	out := wire.ScheduleList{Schedules: []wire.Schedule{}}
	for _, v := range s.cfg.Queries.CaughtUp(r.Context()).Schedules() {
		if principalOf(r).InScope(v.Schedule.Def.Action) {
			out.Schedules = append(out.Schedules, scheduleOut(v.Ref, &v.Schedule))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// getSchedule answers the schedule as the log holds it, with its recent
// ticks (latest first) and the status of each one's execution.
func (s *Server) getSchedule(w http.ResponseWriter, r *http.Request) {
	ref, p := refParam(r)
	if p == nil {
		p = queryOnly(r)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	sc, err := s.cfg.Commands.LoadSchedule(r.Context(), ref)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !sc.Exists {
		writeProblem(w, scheduleNotFound(ref))
		return
	}
	out := s.loadedScheduleOut(ref, sc)
	for _, t := range command.RecentTicks(ref, sc, time.Now(), recentTicks) {
		tk := wire.ScheduleTick{At: t.At, Execution: t.Execution}
		if x, found, err := s.cfg.Queries.Execution(r.Context(), t.Execution); err == nil && found {
			tk.Status = string(x.Status)
		}
		out.Ticks = append(out.Ticks, tk)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request) {
	s.changeSchedule(w, r, s.cfg.Commands.DeleteSchedule, http.StatusNoContent)
}
func (s *Server) pauseSchedule(w http.ResponseWriter, r *http.Request) {
	s.changeSchedule(w, r, s.cfg.Commands.PauseSchedule, http.StatusOK)
}
func (s *Server) resumeSchedule(w http.ResponseWriter, r *http.Request) {
	s.changeSchedule(w, r, s.cfg.Commands.ResumeSchedule, http.StatusOK)
}

// changeSchedule pauses, resumes or deletes; doing it twice is no error.
// An unknown schedule is 404.
func (s *Server) changeSchedule(w http.ResponseWriter, r *http.Request, change func(context.Context, string) (bool, error), ok int) {
	ref, p := refParam(r)
	if p == nil {
		p = queryOnly(r)
	}
	if p == nil {
		var none struct{} // no body, or an empty object
		p = decodeJSON(w, r, s.cfg.MaxBodyBytes, &none, true)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	_, err := change(r.Context(), ref)
	if errors.Is(err, command.ErrUnknownSchedule) {
		writeProblem(w, scheduleNotFound(ref)) // as out of scope, word for word
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if ok == http.StatusNoContent {
		w.WriteHeader(ok)
		return
	}
	sc, err := s.cfg.Commands.LoadSchedule(r.Context(), ref)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, ok, s.loadedScheduleOut(ref, sc))
}
