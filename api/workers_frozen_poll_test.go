package api_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/wire"
)

// TestWorkerFrozenInLongPoll: a worker that froze (SIGSTOP, a network cut
// with no reset) while its long poll was open on the server is declared
// lost within a few leases, not when its poll's wait would have ended: an
// open poll is not a sign of life. Here the poll asks to wait 20 s and the
// lease is 300 ms; the execution the worker ran must be taken back well
// before the 20 s.
func TestWorkerFrozenInLongPoll(t *testing.T) {
	l := startLive(t, 300*time.Millisecond, 0)
	if code := l.post(t, secrets[api.RoleAdmin], "/api/v1/actions", `{"ref":"job","runner":"my.job","max_concurrent":1,"max_attempts":3}`, nil); code != 201 {
		t.Fatalf("define: %d", code)
	}
	var acc wire.Accepted
	l.post(t, secrets[api.RoleClient], "/api/v1/executions", `{"action":"job"}`, &acc)
	a := l.register(t, "wa", `"my.job"`)
	l.waitServed(t, "job", "my.job", true)
	res, _ := l.poll(t, a, `{"wait_seconds":10}`)
	if len(res.Assignments) != 1 {
		t.Fatalf("poll: %+v", res)
	}
	if _, code := l.report(t, a, "wa", `{"execution":"`+acc.ID+`","status":"running"}`); code != 200 {
		t.Fatalf("running: %d", code)
	}
	// wa sends a long poll and freezes: the request is on the server, the
	// connection stays open, nobody reads the answer.
	conn, err := net.Dial("tcp", strings.TrimPrefix(l.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"wait_seconds":20}`
	fmt.Fprintf(conn, "POST /api/v1/workers/wa/poll HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		a.Session, len(body), body)
	frozeAt := time.Now()
	deadline := frozeAt.Add(5 * time.Second)
	for {
		x := l.execution(t, acc.ID)
		if !(x.Status == "running" && x.Worker == "wa") {
			t.Logf("taken back from the frozen worker %.1fs after it froze (%s)", time.Since(frozeAt).Seconds(), x.Status)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the execution is still running on the frozen worker %s after it froze in a long poll (lease 300ms)", time.Since(frozeAt).Round(time.Millisecond))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, code := l.report(t, a, "wa", `{"execution":"`+acc.ID+`","status":"completed"}`); code != 401 && code != 409 {
		t.Errorf("the frozen incarnation's late report: %d, want 401 or 409", code)
	}
	l.audit(t)
}
