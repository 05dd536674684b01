package projections

import (
	"maps"
	"slices"

	"github.com/turnstile/turnstile/domain"
)

// ScheduleView is a schedule as the read model holds it.
type ScheduleView struct {
	Ref      string
	Schedule domain.Schedule // a copy
}

// Schedule returns a schedule that exists (defined and not deleted).
func (v *Views) Schedule(ref string) (ScheduleView, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	s := v.st.Schedules[ref]
	if s == nil || !s.Exists {
		return ScheduleView{}, false
	}
	return ScheduleView{Ref: ref, Schedule: *s}, true
}

// Schedules returns every schedule that exists, sorted by ref.
func (v *Views) Schedules() []ScheduleView {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := []ScheduleView{}
	for _, ref := range slices.Sorted(maps.Keys(v.st.Schedules)) {
		if s := v.st.Schedules[ref]; s.Exists {
			out = append(out, ScheduleView{Ref: ref, Schedule: *s})
		}
	}
	return out
}
