package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
)

// TestScheduleInput: a cron that does not parse (the problem says where),
// an unknown action or timezone, a bad ref, input that is not an object,
// an unknown field: 400 with a problem, and nothing is written.
func TestScheduleInput(t *testing.T) {
	e := newE2E(t)
	e.mustJSON("POST", "/api/v1/actions", map[string]any{"ref": "s.a", "runner": "core.noop"}, http.StatusCreated, nil)
	e.mustJSON("POST", "/api/v1/actions", map[string]any{"ref": "s.echo", "runner": "core.echo"}, http.StatusCreated, nil)
	head, _ := e.store.Head(context.Background())
	for _, c := range []struct{ body, detail string }{
		{`{"ref":"s1","action":"s.a","cron":"61 * * * *"}`, "end of range (61) above maximum (59): 61"},
		{`{"ref":"s1","action":"s.a","cron":"* * * *"}`, "expected 5 to 6 fields, found 4"},
		{`{"ref":"s1","action":"s.a","cron":"* * * * * * *"}`, "found 7"},
		{`{"ref":"s1","action":"s.a","cron":"0 2 * * mon-xyz"}`, "xyz"},
		{`{"ref":"s1","action":"s.a","cron":""}`, "empty spec string"},
		{`{"ref":"s1","action":"s.a","cron":"0 0 30 2 *"}`, "never fires"},
		{`{"ref":"s1","action":"nope","cron":"0 2 * * *"}`, `action "nope" is not defined`},
		{`{"ref":"s1","action":"s.a","cron":"0 2 * * *","timezone":"Mars/Olympus"}`, `unknown timezone "Mars/Olympus"`},
		{`{"ref":"s1","action":"s.a","cron":"CRON_TZ=Europe/Berlin 0 2 * * *","timezone":"Asia/Tokyo"}`, `names the zone "Europe/Berlin" and timezone names "Asia/Tokyo"`},
		{`{"ref":"s1","action":"s.a","cron":"CRON_TZ=Europe/Berlin"}`, "no schedule after the zone"}, // the cron parser panics on it
		{`{"ref":"s/1","action":"s.a","cron":"0 2 * * *"}`, "ref"},
		{`{"ref":"s1","action":"s.a","cron":"0 2 * * *","input":[1]}`, "input must be a JSON object"},
		{`{"ref":"s1","action":"s.a","cron":"0 2 * * *","every":1}`, "every"},
		{`{"ref":"s1","action":"s.echo","cron":"0 2 * * *"}`, "every tick's input"}, // core.echo takes an object
	} {
		st, h, b := e.do("POST", "/api/v1/schedules", c.body)
		var p api.Problem
		if st != http.StatusBadRequest || json.Unmarshal(b, &p) != nil || h.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(p.Detail, c.detail) {
			t.Errorf("%s: %d %s, want 400 with a problem containing %q", c.body, st, b, c.detail)
		}
	}
	if after, _ := e.store.Head(context.Background()); after != head {
		t.Errorf("refused schedules appended %d events", after-head)
	}
	for _, path := range []string{"/api/v1/schedules/none", "/api/v1/schedules/none/pause", "/api/v1/schedules/none/resume"} {
		method := "POST"
		if !strings.HasSuffix(path, "e") || strings.HasSuffix(path, "none") {
			method = "GET"
		}
		if st, _, b := e.do(method, path, nil); st != http.StatusNotFound {
			t.Errorf("%s %s: %d %s, want 404", method, path, st, b)
		}
	}
	if st, _, b := e.do("DELETE", "/api/v1/schedules/none", nil); st != http.StatusNotFound {
		t.Errorf("DELETE unknown: %d %s, want 404", st, b)
	}
}

// TestScheduleRoutes: a schedule every second, through real HTTP with the
// real executor: 201, then 200 for the same definition and 409 for
// another; its ticks request executions that complete, listed with their
// status by GET …/{ref}; pause, resume and delete answer as documented.
func TestScheduleRoutes(t *testing.T) {
	e := newE2E(t)
	e.mustJSON("POST", "/api/v1/actions", map[string]any{"ref": "s.echo", "runner": "core.echo"}, http.StatusCreated, nil)
	def := map[string]any{"ref": "every.second", "action": "s.echo", "cron": "* * * * * *", "input": map[string]any{"n": 1}, "timezone": "Europe/Paris"}
	var sc wire.Schedule
	e.mustJSON("POST", "/api/v1/schedules", def, http.StatusCreated, &sc)
	if sc.Ref != "every.second" || sc.Cron != "* * * * * *" || sc.Timezone != "Europe/Paris" || sc.Paused {
		t.Fatalf("created %+v", sc)
	}
	e.mustJSON("POST", "/api/v1/schedules", def, http.StatusOK, nil)
	def["cron"] = "0 * * * * *"
	if st, _, b := e.do("POST", "/api/v1/schedules", def); st != http.StatusConflict {
		t.Fatalf("a different definition: %d %s, want 409", st, b)
	}

	var got wire.Schedule
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.mustJSON("GET", "/api/v1/schedules/every.second", nil, http.StatusOK, &got)
		done := 0
		for _, tk := range got.Ticks {
			if tk.Status == string(domain.StatusCompleted) {
				done++
				if tk.Execution != domain.ScheduleTickID("every.second", tk.At) {
					t.Fatalf("tick %s lists execution %s, not its derived id", tk.At, tk.Execution)
				}
			}
		}
		if done >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no two ticks completed: %+v", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got.LastTick == nil {
		t.Fatalf("last_tick missing: %+v", got)
	}
	x := e.waitStatus(got.Ticks[len(got.Ticks)-1].Execution, domain.StatusCompleted)
	if x.Action != "s.echo" || !strings.Contains(string(x.Result), `"n":1`) {
		t.Fatalf("tick's execution %+v, want s.echo with the schedule's input", x)
	}

	var list wire.ScheduleList
	e.mustJSON("GET", "/api/v1/schedules", nil, http.StatusOK, &list)
	if len(list.Schedules) != 1 || list.Schedules[0].Ref != "every.second" {
		t.Fatalf("list %+v", list)
	}
	e.mustJSON("POST", "/api/v1/schedules/every.second/pause", nil, http.StatusOK, &got)
	if !got.Paused {
		t.Fatalf("paused: %+v", got)
	}
	e.mustJSON("POST", "/api/v1/schedules/every.second/pause", nil, http.StatusOK, nil)
	e.mustJSON("POST", "/api/v1/schedules/every.second/resume", nil, http.StatusOK, &got)
	if got.Paused {
		t.Fatalf("resumed: %+v", got)
	}
	if st, _, b := e.do("DELETE", "/api/v1/schedules/every.second", nil); st != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", st, b)
	}
	if st, _, _ := e.do("GET", "/api/v1/schedules/every.second", nil); st != http.StatusNotFound {
		t.Fatalf("GET after DELETE: %d, want 404", st)
	}
	e.mustJSON("GET", "/api/v1/schedules", nil, http.StatusOK, &list)
	if len(list.Schedules) != 0 {
		t.Fatalf("list after delete %+v", list)
	}
}

// TestScheduleLastTickAdvances: an every-second schedule's last_tick, as
// GET reads it with the real executor running, advances second by second;
// and every route that answers the schedule answers the same last_tick: a
// second POST of the definition, pause, resume and the list. Before, the
// POST routes answered the schedule's own stream, which holds no tick: no
// last_tick at all, or, after the log's start was archived, the
// checkpoint's forever (a last_tick that looked stuck).
func TestScheduleLastTickAdvances(t *testing.T) {
	e := newE2E(t)
	e.mustJSON("POST", "/api/v1/actions", map[string]any{"ref": "s.noop", "runner": "core.noop"}, http.StatusCreated, nil)
	def := map[string]any{"ref": "every.second", "action": "s.noop", "cron": "* * * * * *"}
	e.mustJSON("POST", "/api/v1/schedules", def, http.StatusCreated, nil)
	var seen []time.Time
	deadline := time.Now().Add(30 * time.Second) // a failure guard: three ticks take three seconds
	for len(seen) < 3 {
		var got wire.Schedule
		e.mustJSON("GET", "/api/v1/schedules/every.second", nil, http.StatusOK, &got)
		if got.LastTick != nil && (len(seen) == 0 || got.LastTick.After(seen[len(seen)-1])) {
			if got.LastTick.After(time.Now()) {
				t.Fatalf("last_tick %v is in the future", got.LastTick)
			}
			seen = append(seen, *got.LastTick)
		}
		if time.Now().After(deadline) {
			t.Fatalf("last_tick took the values %v in 30 s, want three, one a second", seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
	last := seen[len(seen)-1]
	answers := map[string]*wire.Schedule{}
	for _, c := range []struct {
		what, method, path string
		body               any
		status             int
	}{
		{"the same definition again", "POST", "/api/v1/schedules", def, http.StatusOK},
		{"pause", "POST", "/api/v1/schedules/every.second/pause", nil, http.StatusOK},
		{"resume", "POST", "/api/v1/schedules/every.second/resume", nil, http.StatusOK},
		{"get", "GET", "/api/v1/schedules/every.second", nil, http.StatusOK},
	} {
		var got wire.Schedule
		e.mustJSON(c.method, c.path, c.body, c.status, &got)
		answers[c.what] = &got
	}
	var list wire.ScheduleList
	e.mustJSON("GET", "/api/v1/schedules", nil, http.StatusOK, &list)
	if len(list.Schedules) == 1 {
		answers["the list"] = &list.Schedules[0]
	}
	for what, got := range answers {
		if got.LastTick == nil || got.LastTick.Before(last) {
			t.Errorf("%s answers last_tick %v, want at least %v (GET's a moment before)", what, got.LastTick, last)
		}
	}
}
