// Schedules in the simulation: cron schedules on simulated actions, their
// ticks requested by the executors (services/executor/schedule.go) across
// crashes and split brains, and the mutant that requests a tick twice.

package sim

import (
	"bytes"
	"fmt"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/services/command"
)

// defineSchedules defines the simulation's schedules: one every 10 s on
// the first action, one every minute on the second (with its key in the
// input when it has one).
func (w *world) defineSchedules() error {
	defs := []command.Schedule{{Ref: "s0", Action: w.refs[0], Cron: "@every 10s"}}
	if len(w.refs) > 1 {
		defs = append(defs, command.Schedule{Ref: "s1", Action: w.refs[1], Cron: "* * * * *", Input: []byte(`{"customer":"sched"}`)})
	}
	for _, d := range defs {
		if _, err := w.cmds.DefineSchedule(w.ctx, d); err != nil {
			return fmt.Errorf("define schedule %s: %w", d.Ref, err)
		}
	}
	return nil
}

// deleteSchedules deletes the schedules when the faults stop, so that the
// run can end (liveness): ticks requested before go on as any request.
func (w *world) deleteSchedules() error {
	refs := []string{"s0", "s1"}[:min(len(w.refs), 2)]
	for _, ref := range refs {
		if _, err := w.cmds.DeleteSchedule(w.ctx, ref); err != nil {
			return fmt.Errorf("delete schedule %s: %w", ref, err)
		}
	}
	return nil
}

// checkTick is the checker's own rule for schedules: each tick produced at
// most one execution (whatever its id), across the whole log. It returns
// what is wrong, "" if nothing.
func (c *checker) checkTick(id string, e domain.ExecutionRequested) string {
	if e.Schedule == "" {
		return ""
	}
	if c.ticks == nil {
		c.ticks = map[string]string{}
	}
	k := e.Schedule + "\x00" + e.Tick
	if prev, ok := c.ticks[k]; ok && prev != id {
		return fmt.Sprintf("schedule %s tick %s produced a second execution %s (the first: %s)", e.Schedule, e.Tick, id, prev)
	}
	c.ticks[k] = id
	return ""
}

// noTicks rewrites every tick's request in evs as a plain request (no
// schedule, no tick), so the executor's fold never learns a tick was
// requested (BugTickTwice).
func noTicks(evs []domain.Envelope) {
	rewrite(evs, func(ev domain.Event) (domain.Event, bool) {
		e, ok := ev.(domain.ExecutionRequested)
		if !ok || e.Schedule == "" {
			return ev, false
		}
		e.Schedule, e.Tick = "", ""
		return e, true
	}, domain.TypeExecutionRequested)
}

// tickElsewhere moves a tick's request to a stream and event id of its own
// (BugTickTwice): the log no longer fences a second request of the same
// tick by its derived id.
func (b *buggy) tickElsewhere(a *eventstore.StreamAppend) {
	cat, id := domain.SplitStream(a.Stream)
	if cat != domain.StreamExecution || len(a.Events) == 0 || a.Events[0].Type != domain.TypeExecutionRequested ||
		!bytes.Contains(a.Events[0].Data, []byte(`"schedule"`)) {
		return
	}
	base, err := uuid.Parse(id)
	if err != nil {
		return
	}
	b.ticks++
	moved := uuid.NewSHA1(base, fmt.Appendf(nil, "again %d", b.ticks))
	a.Stream = domain.ExecutionStream(moved.String())
	a.Events = append([]domain.Envelope(nil), a.Events...)
	a.Events[0].ID = uuid.NewSHA1(moved, []byte("event"))
}
