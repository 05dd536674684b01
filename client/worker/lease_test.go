package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnstile/turnstile/client/worker"
	"github.com/turnstile/turnstile/domain"
)

// TestHandlerLongerThanTheLease: a handler that runs three leases long
// (and does not look at its ctx) keeps its worker alive, since the worker
// polls on, by itself, while it runs: the execution runs once, ends with
// its one result at attempt 1, and the log holds no worker.lost and no
// take-back. A worker that polled only between runs would be declared lost
// one lease into the run, its result refused, the run handed again.
func TestHandlerLongerThanTheLease(t *testing.T) {
	const lease = 600 * time.Millisecond
	srv := serverForTest(t, lease)
	var runs atomic.Int32
	w := worker.New(worker.Config{Server: srv.URL, Name: "w-long", Slots: 1, Logger: quiet})
	w.Handle("long", func(ctx context.Context, job worker.Job) (any, error) {
		runs.Add(1)
		time.Sleep(3 * lease)
		return map[string]any{"attempt": job.Attempt}, nil
	})
	runWorker(t, w)
	if _, err := do("POST", srv.URL+"/api/v1/actions", `{"ref":"long","runner":"long","max_attempts":3}`, nil); err != nil {
		t.Fatal(err)
	}
	id, err := srv.request("long", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	x, err := srv.waitEnd(id, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if x.Status != "completed" || string(x.Result) != `{"attempt":1}` || x.Worker != "w-long" {
		t.Fatalf("the execution: %+v, want completed with {\"attempt\":1}", x)
	}
	time.Sleep(lease) // a late verdict or a second run would show by now
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once", n)
	}
	ctx := context.Background()
	evs, err := srv.Store.ReadStream(ctx, domain.ExecutionStream(id), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range evs {
		count[e.Type]++
	}
	if count[domain.TypeExecutionScheduled] != 1 || count[domain.TypeExecutionRunning] != 1 || count[domain.TypeExecutionCompleted] != 1 ||
		count[domain.TypeExecutionAbandoned] != 0 {
		t.Errorf("the execution's events: %v, want one handoff, one start, one end", count)
	}
	wevs, err := srv.Store.ReadStream(ctx, domain.WorkerStream("w-long"), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range wevs {
		if e.Type == domain.TypeWorkerLost {
			t.Errorf("the worker was declared lost while its handler ran: %+v", e)
		}
	}
	audit(t, srv)
}
