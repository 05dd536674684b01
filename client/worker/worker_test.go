package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnstile/turnstile/client/worker"
	"github.com/turnstile/turnstile/projections"
)

func serverForTest(t *testing.T, lease time.Duration) *server {
	t.Helper()
	srv, err := startServer(lease)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.stop)
	return srv
}

func runWorker(t *testing.T, w *worker.Worker) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func audit(t *testing.T, srv *server) {
	t.Helper()
	rep, err := projections.Audit(context.Background(), srv.Store, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("audit: %v", rep.Violations)
	}
}

// TestCancelReachesTheHandler: a client's cancellation ends the handler's
// ctx (cause ErrCancelled) and the execution is recorded cancelled.
func TestCancelReachesTheHandler(t *testing.T) {
	srv := serverForTest(t, 15*time.Second)
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	w := worker.New(worker.Config{Server: srv.URL, Name: "w", Slots: 1, Logger: quiet})
	w.Handle("block", func(ctx context.Context, job worker.Job) (any, error) {
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	runWorker(t, w)
	if _, err := do("POST", srv.URL+"/api/v1/actions", `{"ref":"b","runner":"block"}`, nil); err != nil {
		t.Fatal(err)
	}
	id, err := srv.request("b", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never started")
	}
	if _, err := do("POST", srv.URL+"/api/v1/executions/"+id+"/cancel", ``, nil); err != nil {
		t.Fatal(err)
	}
	x, err := srv.waitEnd(id, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if x.Status != "cancelled" {
		t.Errorf("status %s, want cancelled", x.Status)
	}
	if c := <-causes; !errors.Is(c, worker.ErrCancelled) {
		t.Errorf("ctx cause %v, want ErrCancelled", c)
	}
	audit(t, srv)
}

// lossy delivers every request to the server but loses the answer of the
// first try of each report, and of the first polls (up to lossyPolls) that
// hand assignments (whose start the server records on the poll): the
// worker must send the report again, the server must offer the started
// assignments again, and the server's idempotence must keep the log free
// of duplicates.
type lossy struct {
	mu        sync.Mutex
	seen      map[string]bool
	lost      int
	lostPolls int
}

const lossyPolls = 3

func (l *lossy) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, "/poll") {
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			return resp, err
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		lose := strings.Contains(string(raw), `"execution":`) && l.lostPolls < lossyPolls
		if lose {
			l.lostPolls++
		}
		l.mu.Unlock()
		if lose {
			return nil, errors.New("connection reset (simulated after the server answered a poll)")
		}
		resp.Body = io.NopCloser(strings.NewReader(string(raw)))
		return resp, nil
	}
	var body string
	if req.Body != nil && strings.HasSuffix(req.URL.Path, "/report") {
		raw, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		b, _ := io.ReadAll(raw)
		body = string(b)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || body == "" {
		return resp, err
	}
	l.mu.Lock()
	first := !l.seen[body]
	l.seen[body] = true
	if first {
		l.lost += strings.Count(body, `"execution":`) // the reports whose answer is lost (a call may carry several)
	}
	l.mu.Unlock()
	if first {
		resp.Body.Close()
		return nil, errors.New("connection reset (simulated after the server answered)")
	}
	return resp, nil
}

// TestReportsSurviveLostAnswers: every report's first answer is lost on the
// way back, and so are the answers of the first polls that hand
// assignments (started by the poll: the server offers them again); the
// executions still complete, each exactly once, and the audit is clean.
func TestReportsSurviveLostAnswers(t *testing.T) {
	srv := serverForTest(t, 15*time.Second)
	tr := &lossy{seen: map[string]bool{}}
	// (Short polls: a started assignment whose poll answer was lost comes
	// again with a later poll's answer, at the latest after its wait.)
	w := worker.New(worker.Config{Server: srv.URL, Name: "w", Slots: 4, Logger: quiet, HTTPClient: &http.Client{Transport: tr}, PollWait: time.Second})
	w.Handle("echo", func(ctx context.Context, job worker.Job) (any, error) { return job.Input, nil })
	runWorker(t, w)
	if _, err := do("POST", srv.URL+"/api/v1/actions", `{"ref":"e","runner":"echo","max_concurrent":3}`, nil); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 20 {
		id, err := srv.request("e", `{"n":1}`)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		x, err := srv.waitEnd(id, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if x.Status != "completed" || string(x.Result) != `{"n":1}` {
			t.Errorf("%s: %+v", id, x)
		}
	}
	tr.mu.Lock()
	lost, lostPolls := tr.lost, tr.lostPolls
	tr.mu.Unlock()
	if lost < 20 || lostPolls < lossyPolls {
		t.Errorf("only %d reports' answers and %d polls' were lost; the test did not test", lost, lostPolls)
	}
	audit(t, srv)
}

// TestDrainLetsRunsFinish: ending Run's ctx while a run is in flight lets
// it finish and report before Run returns.
func TestDrainLetsRunsFinish(t *testing.T) {
	srv := serverForTest(t, 15*time.Second)
	started := make(chan struct{}, 1)
	w := worker.New(worker.Config{Server: srv.URL, Name: "w", Slots: 1, Logger: quiet})
	w.Handle("slow", func(ctx context.Context, job worker.Job) (any, error) {
		started <- struct{}{}
		time.Sleep(300 * time.Millisecond)
		return map[string]bool{"done": true}, ctx.Err()
	})
	stop := runWorker(t, w)
	if _, err := do("POST", srv.URL+"/api/v1/actions", `{"ref":"s","runner":"slow"}`, nil); err != nil {
		t.Fatal(err)
	}
	id, _ := srv.request("s", `{}`)
	<-started
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var x execution
	if _, err := do("GET", srv.URL+"/api/v1/executions/"+id, "", &x); err != nil {
		t.Fatal(err)
	}
	// Run returned after the report: the read model may trail the log a little.
	x, err := srv.waitEnd(id, 5*time.Second)
	if err != nil || x.Status != "completed" {
		t.Fatalf("after the drain: %+v %v", x, err)
	}
	audit(t, srv)
}

// TestRefusedResultIsReportedFailed: a result the server refuses as too
// large (413, over its --max-result-bytes or over a request body) is
// reported again as a failure that says why, with no result, instead of
// leaving the execution running until its timeout; a result that fits is
// recorded as it is.
func TestRefusedResultIsReportedFailed(t *testing.T) {
	srv := serverForTest(t, 15*time.Second)
	w := worker.New(worker.Config{Server: srv.URL, Name: "w", Slots: 4, Logger: quiet, PollWait: time.Second})
	w.Handle("big", func(ctx context.Context, job worker.Job) (any, error) {
		var in struct{ N int }
		_ = json.Unmarshal(job.Input, &in)
		return map[string]string{"s": strings.Repeat("x", in.N)}, nil
	})
	runWorker(t, w)
	if _, err := do("POST", srv.URL+"/api/v1/actions", `{"ref":"b","runner":"big","max_concurrent":4}`, nil); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[int]string{100: "completed", 300 << 10: "failed", 2 << 20: "failed"} {
		id, err := srv.request("b", fmt.Sprintf(`{"n":%d}`, n))
		if err != nil {
			t.Fatal(err)
		}
		x, err := srv.waitEnd(id, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if x.Status != want || (want == "failed" && (x.Result != nil || !strings.Contains(x.Error, "the server refused the result"))) {
			t.Errorf("a result of %d bytes: %s %q, %d bytes of result; want %s", n, x.Status, x.Error, len(x.Result), want)
		}
	}
	audit(t, srv)
}
