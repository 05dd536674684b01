package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
)

// TestRemoteWorkerQuietLease: a remote worker's polls keep its lease
// without writing while it holds nothing (an idle worker owes the log no
// sign of life): three leases of polls and heartbeats write no
// worker.heartbeat, and it is not lost. Handed an execution that it runs
// for three leases, its polls pay its debt (heartbeats) and it is not lost;
// once it reported the end and paid, it is quiet again.
func TestRemoteWorkerQuietLease(t *testing.T) {
	const lease = 300 * time.Millisecond
	l := startLive(t, lease, 0)
	if code := l.post(t, secrets[api.RoleAdmin], "/api/v1/actions", `{"ref":"job","runner":"my.job","max_concurrent":1,"max_attempts":1}`, nil); code != 201 {
		t.Fatalf("define: %d", code)
	}
	a := l.register(t, "wa", `"my.job"`)
	beats := func() (hb, lost int) {
		envs, err := l.store.ReadStream(context.Background(), domain.WorkerStream("wa"), 0, 100_000)
		if err != nil {
			t.Fatal(err)
		}
		for _, env := range envs {
			switch env.Type {
			case domain.TypeWorkerHeartbeat:
				hb++
			case domain.TypeWorkerLost:
				lost++
			}
		}
		return hb, lost
	}
	// pollFor polls (and posts heartbeats) for d, handing back any
	// assignment it gets.
	pollFor := func(d time.Duration) (got []wire.Assignment) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			res, code := l.poll(t, a, `{"wait_seconds":0.05}`)
			if code != 200 {
				t.Fatalf("poll: %d", code)
			}
			got = append(got, res.Assignments...)
			if code := l.post(t, a.Session, "/api/v1/workers/wa/heartbeat", ``, nil); code != 204 {
				t.Fatalf("heartbeat: %d", code)
			}
		}
		return got
	}
	pollFor(3 * lease)
	if hb, lost := beats(); hb != 0 || lost != 0 {
		t.Fatalf("idle for three leases: %d heartbeats, %d verdicts; want none", hb, lost)
	}

	var acc wire.Accepted
	l.post(t, secrets[api.RoleClient], "/api/v1/executions", `{"action":"job"}`, &acc)
	var as []wire.Assignment
	for deadline := time.Now().Add(5 * time.Second); len(as) == 0; {
		as = pollFor(10 * time.Millisecond)
		if time.Now().After(deadline) {
			t.Fatal("never handed the execution")
		}
	}
	if _, code := l.report(t, a, "wa", `{"execution":"`+acc.ID+`","status":"running"}`); code != 200 {
		t.Fatalf("running: %d", code)
	}
	pollFor(3 * lease)
	if hb, lost := beats(); hb < 3 || lost != 0 {
		t.Fatalf("running for three leases: %d heartbeats, %d verdicts; want one at least every lease, and no verdict", hb, lost)
	}
	if _, code := l.report(t, a, "wa", `{"execution":"`+acc.ID+`","status":"completed"}`); code != 200 {
		t.Fatalf("completed: %d", code)
	}
	pollFor(lease) // pays what it still owes
	settled, _ := beats()
	pollFor(3 * lease)
	if hb, lost := beats(); hb != settled || lost != 0 {
		t.Fatalf("idle again for three leases: heartbeats %d → %d, %d verdicts; want no more and none", settled, hb, lost)
	}
	if x := l.waitStatus(t, acc.ID, "completed"); x.Worker != "wa" {
		t.Errorf("completed by %q", x.Worker)
	}
	l.audit(t)
}
