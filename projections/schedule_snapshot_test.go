package projections_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
)

// TestScheduleSurvivesSnapshot: a schedule (its definition, pause state,
// since and last tick) is in the state's snapshot file and restored from
// it, and decides the same due tick after the restore.
func TestScheduleSurvivesSnapshot(t *testing.T) {
	s := projections.NewState()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sc := &domain.Schedule{}
	sc.Apply(domain.ScheduleDefined{Action: "a", Cron: "*/5 * * * *", Timezone: "Europe/Paris", Input: json.RawMessage(`{"x":1}`)}, 0, at)
	sc.NoteTick(at.Add(time.Minute - 5*time.Second)) // 03:05
	s.Schedules["s"] = sc
	files := projections.SnapshotFiles{Dir: t.TempDir()}
	if err := files.Save("state", 1, "", s.Snapshot()); err != nil {
		t.Fatal(err)
	}
	var sn projections.StateSnapshot
	if _, ok, err := files.Read("state", &sn); err != nil || !ok {
		t.Fatalf("read: %v %v", ok, err)
	}
	got := projections.RestoreState(&sn).Schedules["s"]
	if got == nil || got.Def.Cron != "*/5 * * * *" || got.Def.Timezone != "Europe/Paris" || string(got.Def.Input) != `{"x":1}` ||
		!got.Since.Equal(at) || !got.LastTick.Equal(sc.LastTick) || !got.Exists || got.Paused {
		t.Fatalf("restored %+v, want %+v", got, sc)
	}
	now := at.Add(20 * time.Minute)
	want, _ := sc.Due(now, 1000)
	if tick, ok := got.Due(now, 1000); !ok || !tick.Equal(want) || !tick.Equal(time.Date(2026, 1, 2, 3, 20, 0, 0, time.UTC)) {
		t.Fatalf("restored schedule due %v %v, want %v", tick, ok, want)
	}
}
