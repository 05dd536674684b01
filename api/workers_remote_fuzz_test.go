package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// FuzzWorkerRoutes drives the worker session routes with any body and
// name, presenting a live session: no panic, no 500, only documented
// statuses, and a refused request (a refused report included) writes
// nothing to the log. Drain, which ends the session, is driven too: the
// next input registers again.
func FuzzWorkerRoutes(f *testing.F) {
	ft := newFuzzTarget(f)
	session := ""
	f.Add(uint8(0), sessionName, `{"max":1,"wait_seconds":0}`)
	f.Add(uint8(1), sessionName, `{"execution":"`+ft.execID+`","status":"completed","result":{"a":1}}`)
	f.Add(uint8(1), sessionName, `{"reports":[{"execution":"`+ft.execID+`","status":"running"},{"execution":"x","status":"failed","error":"e"}]}`)
	f.Add(uint8(1), sessionName, `{"execution":"`+ft.execID+`","status":"done"}`)
	f.Add(uint8(1), sessionName, `{"reports":[],"execution":"a"}`)
	f.Add(uint8(2), sessionName, ``)
	f.Add(uint8(3), "other", `{}`)
	f.Add(uint8(3), sessionName, `{}`)
	ops := []string{"pollWorker", "reportWorker", "heartbeatWorker", "drainWorker"}
	paths := []string{"poll", "report", "heartbeat", "drain"}
	f.Fuzz(func(t *testing.T, route uint8, name, body string) {
		if !escapedSegment(name) {
			return
		}
		if _, err := ft.a.remote.Authenticate(sessionName, session); err != nil {
			session = ft.a.session(t)
		}
		i := int(route) % len(ops)
		req := request("POST", "/api/v1/workers/"+name+"/"+paths[i], "", body)
		req.Header.Set("Authorization", "Bearer "+session)
		ctx, cancel := context.WithTimeout(req.Context(), 100*time.Millisecond) // a poll waits for work
		defer cancel()
		rec := ft.serve(t, ops[i], req.WithContext(ctx))
		if rec.Code == http.StatusOK && i == 1 && rec.Body.Len() == 0 {
			t.Fatalf("a report answered 200 with no body")
		}
	})
}
