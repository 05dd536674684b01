package api_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/remote"
)

// TestRemoteRunDeadline: a remote worker reports running and then only
// polls. Its run ends timed_out within timeout_seconds plus
// remote.DeadlineGrace, written by the server on the worker's behalf (owner
// worker, the worker's name), the worker's next poll carries the cancel,
// the action's one slot goes to the next waiter, a late report of the run
// gets 409 and writes nothing, and the audit passes.
func TestRemoteRunDeadline(t *testing.T) {
	l := startLive(t, 15*time.Second, 0)
	const timeout = time.Second
	grace := remote.DeadlineGrace(timeout)
	if code := l.post(t, secrets[api.RoleAdmin], "/api/v1/actions", `{"ref":"slow","runner":"my.slow","max_concurrent":1,"timeout_seconds":1}`, nil); code != 201 {
		t.Fatalf("define: %d", code)
	}
	w := l.register(t, "w-deadline", `"my.slow"`)
	var first, next wire.Accepted
	l.post(t, secrets[api.RoleClient], "/api/v1/executions", `{"action":"slow"}`, &first)
	l.post(t, secrets[api.RoleClient], "/api/v1/executions", `{"action":"slow"}`, &next)

	res, code := l.poll(t, w, `{"max":2,"wait_seconds":10}`)
	if code != 200 || len(res.Assignments) != 1 || res.Assignments[0].Execution != first.ID || res.Assignments[0].TimeoutSeconds != 1 {
		t.Fatalf("poll: %d %+v", code, res)
	}
	if out, code := l.report(t, w, w.Name, `{"execution":"`+first.ID+`","attempt":1,"status":"running"}`); code != 200 || out.Status != "running" {
		t.Fatalf("running: %d %+v", code, out)
	}
	started := time.Now()

	// The worker only polls from here on: the cancel comes, and the next waiter.
	var cancelled time.Duration
	var handed []wire.Assignment
	for cancelled == 0 || len(handed) == 0 {
		if time.Since(started) > timeout+grace+5*time.Second {
			t.Fatalf("after %s: cancel after %s, handed %+v; the first run is %s", time.Since(started), cancelled, handed, l.execution(t, first.ID).Status)
		}
		res, code := l.poll(t, w, `{"max":2,"wait_seconds":2}`)
		if code != 200 {
			t.Fatalf("poll: %d", code)
		}
		if slices.Contains(res.Cancels, first.ID) && cancelled == 0 {
			cancelled = time.Since(started)
		}
		for _, a := range res.Assignments {
			if a.Execution == first.ID {
				t.Fatalf("the overdue run was handed again: %+v", a)
			}
			handed = append(handed, a)
		}
	}
	if cancelled < timeout+grace-250*time.Millisecond || cancelled > timeout+grace+time.Second {
		t.Errorf("the cancel came %s after the start; want at %s + %s (the grace left to the worker, then at once)", cancelled, timeout, grace)
	}
	x := l.waitStatus(t, first.ID, "timed_out", "completed", "failed", "cancelled")
	if x.Status != "timed_out" || x.Worker != w.Name || x.Attempt != 1 {
		t.Fatalf("the overdue run: %+v", x)
	}
	last := lastEvent(t, l, first.ID)
	if last.Type != domain.TypeExecutionTimedOut || last.Owner != domain.OwnerWorker || last.Writer != w.Name {
		t.Errorf("the run's end: %s by %s %s, want execution.timed_out by worker %s", last.Type, last.Owner, last.Writer, w.Name)
	}

	// A late report of the run: 409, nothing written.
	h := l.head(t)
	for _, body := range []string{
		`{"execution":"` + first.ID + `","attempt":1,"status":"completed","result":{"late":true}}`,
		`{"execution":"` + first.ID + `","attempt":1,"status":"failed","error":"late"}`,
	} {
		if _, code := l.report(t, w, w.Name, body); code != 409 {
			t.Errorf("a late report %s: %d, want 409", body, code)
		}
	}
	if got := l.head(t); got != h {
		t.Errorf("late reports wrote %d events", got-h)
	}

	// The freed slot went to the next waiter, which runs and ends as usual.
	if len(handed) != 1 || handed[0].Execution != next.ID {
		t.Fatalf("handed after the deadline: %+v", handed)
	}
	if out, code := l.report(t, w, w.Name, `{"execution":"`+next.ID+`","attempt":1,"status":"completed","result":{"ok":1}}`); code != 200 || out.Status != "completed" {
		t.Fatalf("the next waiter's report: %d %+v", code, out)
	}
	if x := l.waitStatus(t, next.ID, "completed", "timed_out"); x.Status != "completed" {
		t.Errorf("the next waiter: %+v", x)
	}
	l.audit(t)
}

// TestRemoteRunDeadlineRetries: with a retry policy, an overdue remote run
// ends its attempt (run_failed, as a worker's own timed_out report would)
// and the execution is handed again, attempt 2; the worker is told to stop
// attempt 1, and attempt 1's late report is refused.
func TestRemoteRunDeadlineRetries(t *testing.T) {
	l := startLive(t, 15*time.Second, 0)
	if code := l.post(t, secrets[api.RoleAdmin], "/api/v1/actions",
		`{"ref":"slow2","runner":"my.slow2","max_concurrent":1,"timeout_seconds":0.5,"retry":{"max_attempts":2,"backoff_seconds":0.1}}`, nil); code != 201 {
		t.Fatalf("define: %d", code)
	}
	w := l.register(t, "w-retry", `"my.slow2"`)
	var acc wire.Accepted
	l.post(t, secrets[api.RoleClient], "/api/v1/executions", `{"action":"slow2"}`, &acc)
	if res, code := l.poll(t, w, `{"max":1,"wait_seconds":10}`); code != 200 || len(res.Assignments) != 1 || res.Assignments[0].Attempt != 1 {
		t.Fatalf("poll: %d %+v", code, res)
	}
	if _, code := l.report(t, w, w.Name, `{"execution":"`+acc.ID+`","attempt":1,"status":"running"}`); code != 200 {
		t.Fatalf("running: %d", code)
	}
	deadline := time.Now().Add(15 * time.Second)
	cancelled, again := false, false
	for !cancelled || !again {
		if time.Now().After(deadline) {
			t.Fatalf("cancelled %v, handed again %v; the execution is %+v", cancelled, again, l.execution(t, acc.ID))
		}
		res, _ := l.poll(t, w, `{"max":1,"wait_seconds":2}`)
		cancelled = cancelled || slices.Contains(res.Cancels, acc.ID)
		for _, a := range res.Assignments {
			again = again || a.Attempt == 2
		}
	}
	h := l.head(t)
	if _, code := l.report(t, w, w.Name, `{"execution":"`+acc.ID+`","attempt":1,"status":"completed"}`); code != 409 || l.head(t) != h {
		t.Errorf("attempt 1's late report: %d, %d events", code, l.head(t)-h)
	}
	if out, code := l.report(t, w, w.Name, `{"execution":"`+acc.ID+`","attempt":2,"status":"completed","result":{"ok":2}}`); code != 200 || out.Status != "completed" {
		t.Fatalf("attempt 2: %d %+v", code, out)
	}
	if x := l.waitStatus(t, acc.ID, "completed", "timed_out", "failed"); x.Status != "completed" || x.Attempt != 2 {
		t.Errorf("after the retry: %+v", x)
	}
	l.audit(t)
}

// lastEvent returns the last event of execution id's stream.
func lastEvent(t *testing.T, l *liveAPI, id string) domain.Envelope {
	t.Helper()
	evs, err := l.store.ReadStream(context.Background(), domain.ExecutionStream(id), 0, 1000)
	if err != nil || len(evs) == 0 {
		t.Fatalf("read %s: %v (%d events)", id, err, len(evs))
	}
	return evs[len(evs)-1]
}
