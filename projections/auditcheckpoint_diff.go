package projections

// diffSnapshots names the first part where two states differ, for the
// audit's checkpoint rule: which list, which item (its gob encoding
// compared), so that a checkpoint that is not the fold says where.

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"reflect"

	"github.com/turnstile/turnstile/domain"
)

func gobOf(v any) []byte {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(v); err != nil {
		return []byte(err.Error())
	}
	return b.Bytes()
}

// diffList compares two lists item by item; key names an item.
func diffList[T any](name string, a, b []T, key func(T) string) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%s: %d and %d items", name, len(a), len(b))
	}
	for i := range a {
		if !bytes.Equal(gobOf(a[i]), gobOf(b[i])) {
			return fmt.Sprintf("%s[%s]: %+v and %+v", name, key(a[i]), a[i], b[i])
		}
	}
	return ""
}

// diffSnapshots returns "" when a and b encode alike, else where they differ
// (a: the checkpoint's, b: the fold's).
func diffSnapshots(a, b *StateSnapshot) string {
	if a.Next != b.Next {
		return fmt.Sprintf("Next: %d and %d", a.Next, b.Next)
	}
	for i := range min(len(a.Queues.Queues), len(b.Queues.Queues)) {
		qa, qb := a.Queues.Queues[i], b.Queues.Queues[i]
		for k := range min(len(qa.Keys), len(qb.Keys)) {
			ka, kb := qa.Keys[k], qb.Keys[k]
			if d := diffList("queue "+qa.Ref+" key "+ka.Key+" waiting", ka.Waiting.List(), kb.Waiting.List(), func(w domain.WaiterSnapshot) string { return w.Execution }); d != "" {
				return d
			}
			ka.Waiting, kb.Waiting = domain.Waiters{}, domain.Waiters{}
			if !bytes.Equal(gobOf(ka), gobOf(kb)) {
				return fmt.Sprintf("queue %s key %s: %+v and %+v", qa.Ref, ka.Key, ka, kb)
			}
		}
		qa.Keys, qb.Keys = nil, nil
		if !reflect.DeepEqual(gobOf(qa), gobOf(qb)) {
			return fmt.Sprintf("queue %s: %+v and %+v", qa.Ref, qa, qb)
		}
	}
	if len(a.Queues.Queues) != len(b.Queues.Queues) {
		return fmt.Sprintf("queues: %d and %d", len(a.Queues.Queues), len(b.Queues.Queues))
	}
	if a.statsFrom() != b.statsFrom() {
		return fmt.Sprintf("statistics counted from %d and %d", a.statsFrom(), b.statsFrom())
	}
	for _, d := range []string{
		diffList("pending rejections", a.Queues.Pending, b.Queues.Pending, func(r domain.Rejection) string { return r.Execution }),
		diffList("changed queues", a.Queues.Changed, b.Queues.Changed, func(s string) string { return s }),
		diffList("executions", a.Executions, b.Executions, func(x domain.ExecutionSnapshot) string { return x.ID }),
		diffList("workers", a.Workers, b.Workers, func(w WorkerStateSnapshot) string { return w.Worker.ID }),
		diffList("actions", a.Actions, b.Actions, func(x ActionStateSnapshot) string { return x.Ref }),
		diffList("attention", a.Attention, b.Attention, func(s string) string { return s }),
		diffList("fanouts", a.Fanouts, b.Fanouts, func(f FanoutSnapshot) string { return f.Parent }),
		diffList("unscheduled", a.Unscheduled, b.Unscheduled, func(u UnscheduledSnapshot) string { return u.Execution }),
		diffList("announced", a.Announced, b.Announced, func(x AnnouncedSnapshot) string { return x.Ref }),
		diffList("schedules", a.Schedules, b.Schedules, func(x ScheduleSnapshot) string { return x.Ref }),
		diffList("statistics", a.Stats, b.Stats, func(x StatsSnapshot) string { return x.Ref }),
	} {
		if d != "" {
			return d
		}
	}
	return ""
}
