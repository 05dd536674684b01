package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
)

// FuzzCreateSchedule: any body gets a documented status, never a 500, and
// writes nothing unless it is accepted; what is accepted reads back.
func FuzzCreateSchedule(f *testing.F) {
	ft := newFuzzTarget(f)
	f.Add(`{"ref":"fz.s","action":"demo","cron":"0 2 * * *"}`)
	f.Add(`{"ref":"fz.s","action":"demo","cron":"*/5 * * * * *","input":{"seconds":0.1},"timezone":"America/New_York"}`)
	f.Add(`{"ref":"fz.s","action":"demo","cron":"@every 1h30m"}`)
	f.Add(`{"ref":"fz.s","action":"demo","cron":"61 * * * *"}`)
	f.Add(`{"ref":"fz.s","action":"demo","cron":"0 2 * * *","timezone":"Local"}`)
	f.Add(`{"ref":"fz.s","action":"nope","cron":"0 2 * * *"}`)
	f.Add(`{"ref":"fz.s","action":"demo","cron":"0 0 30 2 *"}`)
	f.Fuzz(func(t *testing.T, body string) {
		rec := ft.serve(t, "createSchedule", request("POST", "/api/v1/schedules", "", body))
		if rec.Code == http.StatusCreated || rec.Code == http.StatusOK {
			var v struct{ Ref, Action, Cron string }
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || v.Ref == "" || v.Action == "" {
				t.Fatalf("%d with %q: %v", rec.Code, rec.Body.Bytes(), err)
			}
			if got := ft.serve(t, "getSchedule", request("GET", "/api/v1/schedules/"+v.Ref, "", "")); got.Code != http.StatusOK {
				t.Fatalf("GET the accepted schedule %s: %d %s", v.Ref, got.Code, got.Body.Bytes())
			}
		}
	})
}
