package projections

import (
	"fmt"
	"time"

	"github.com/turnstile/turnstile/domain"
)

// RuleScheduleTick: each schedule tick produced at most one execution, the
// one whose id derives from the schedule and the tick (domain.ScheduleTickID).
const RuleScheduleTick = "schedule_tick"

// auditTicks remembers the execution of every schedule tick seen.
type auditTicks map[string]string // schedule + "\x00" + tick → execution id

// check says what is wrong with execution id's request r of a schedule tick
// ("" if nothing): a tick requested by a second execution, or an id not
// derived from the tick.
func (a auditTicks) check(id string, r domain.ExecutionRequested) string {
	if r.Schedule == "" {
		return ""
	}
	t, err := time.Parse(time.RFC3339, r.Tick)
	if err != nil {
		return fmt.Sprintf("schedule %s: tick %q is not RFC 3339", r.Schedule, r.Tick)
	}
	if want := domain.ScheduleTickID(r.Schedule, t); id != want {
		return fmt.Sprintf("schedule %s tick %s requested as execution %s, not %s (its derived id)", r.Schedule, r.Tick, id, want)
	}
	k := r.Schedule + "\x00" + r.Tick
	if prev, ok := a[k]; ok && prev != id {
		return fmt.Sprintf("schedule %s tick %s produced a second execution %s (the first: %s)", r.Schedule, r.Tick, id, prev)
	}
	a[k] = id
	return ""
}
