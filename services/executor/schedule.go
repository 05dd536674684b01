// The schedule rule: the active executor requests each due tick of every
// schedule, as a plain execution whose id derives from (schedule, tick).

package executor

import (
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// maxTickSteps bounds the ticks one decision steps through to find a
// schedule's latest due tick (see domain.Schedule.Due).
const maxTickSteps = 100_000

// decideSchedules requests, for each schedule, its latest due tick
// (domain.Schedule.Due at now): one execution.requested in the stream of
// domain.ScheduleTickID, expected to be new, with an event id derived from
// the tick too. Every executor (a restarted one, one taking over after a
// fail-over) writes the same event to the same stream, so a tick already
// requested is never requested again: the store refuses a second request
// (the stream exists) or takes it as the idempotent replay of the first.
// Ticks missed while no executor was active: only the latest is requested
// (one catch-up run); ticks while paused are never requested. Where appends
// to several streams are atomic, the request is fenced by the schedule
// stream's version, so a pause or a deletion that the fold has not seen yet
// refuses it; on a single-stream log (KurrentDB) one tick may still follow
// a pause or deletion the executor had not folded.
func (e *Executor) decideSchedules(ops []op, now time.Time) []op {
	for _, ref := range sortedKeys(e.state.Schedules) {
		if len(ops) >= e.cfg.MaxBatch {
			break
		}
		sc := e.state.Schedules[ref]
		tick, ok := sc.Due(now, maxTickSteps)
		if !ok {
			continue
		}
		id := domain.ScheduleTickID(ref, tick)
		xs := domain.ExecutionStream(id)
		if e.busy(xs) || e.state.Execution(id) != nil {
			continue
		}
		ev, err := domain.NewExecution(id).Request(domain.ExecutionRequested{
			Action: sc.Def.Action, Input: sc.Def.Input, Schedule: ref, Tick: domain.FormatTick(tick),
		})
		if err != nil {
			e.log.Error("cannot request a schedule's tick", "schedule", ref, "tick", tick, "err", err)
			continue
		}
		appends := []eventstore.StreamAppend{e.stageAfter(uuid.MustParse(id), xs, -1, ev)}
		if !e.single {
			// fenced by the schedule's version as folded: a pause or a
			// deletion the fold has not seen yet refuses the tick
			appends = append(appends, eventstore.StreamAppend{Stream: domain.ScheduleStream(ref), Expected: eventstore.Exact(sc.Version)})
		}
		ops = append(ops, op{what: "tick " + ref, count: &e.Stats.Ticks, appends: appends})
	}
	return ops
}
