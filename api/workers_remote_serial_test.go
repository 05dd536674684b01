package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/remote"
	"github.com/turnstile/turnstile/services/repository"
)

// TestWorkerSerialFence: over HTTP, on a log without atomic multi-stream
// appends (storetest.SingleStream, as KurrentDB before 26). An execution
// is handed to w1's incarnation; an executor that had not folded that
// handoff declares the incarnation lost (two executors deciding at once),
// and the server has not yet heard the verdict (its follower lags). The
// session's running report, a batch of it and a poll that starts what it
// hands are each refused by the serial fence (the heartbeat that must
// precede a run's first write): the report with a 409 problem, the start
// poll by leaving the assignment out; nothing is written.
func TestWorkerSerialFence(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	mem := memstore.New(memstore.Options{})
	store := storetest.SingleStream(mem)
	cmds := &command.Service{Store: store, Writer: "test"}
	views := projections.NewViews()
	done := make(chan error, 1)
	go func() { done <- views.Run(ctx, store) }()
	rs, err := remote.New(remote.Config{Store: verdictBlind{store}, Lease: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-rs.Started()
	srv := api.New(api.Config{Commands: cmds, Queries: projections.NewQueries(views, store), Remote: rs, Logger: quiet, Tokens: allTokens(t)})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		rs.Stop()
		cancel()
		<-done
		_ = mem.Close()
	})
	l := &liveAPI{url: hs.URL, store: mem}

	p := domain.Policy{Ref: "job", Runner: "my.job", MaxConcurrent: 1}.WithDefaults()
	if _, err := cmds.DefineAction(ctx, p); err != nil {
		t.Fatal(err)
	}
	id, _, err := cmds.Request(ctx, command.Request{Action: "job"})
	if err != nil {
		t.Fatal(err)
	}
	w1 := l.register(t, "w1", `"my.job"`)
	for _, step := range []repository.Decide{ // executor-1's grant and handoff
		func(x *domain.Execution) (domain.Event, error) { return x.Grant("") },
		func(x *domain.Execution) (domain.Event, error) { return x.Schedule("w1", w1.Incarnation, p) },
	} {
		if _, err := repository.UpdateExecution(ctx, store, id, domain.OwnerExecutor, "executor-1", nil, step); err != nil {
			t.Fatal(err)
		}
	}
	if res, code := l.poll(t, w1, `{"wait_seconds":5}`); code != 200 || len(res.Assignments) != 1 || res.Assignments[0].Execution != id {
		t.Fatalf("poll: %d %+v, want the handoff of %s", code, res, id)
	}
	if _, err := repository.UpdateWorker(ctx, store, "w1", domain.OwnerExecutor, "executor-2", nil, func(w *domain.Worker) (domain.Event, error) {
		return w.DeclareLost(time.Now(), time.Second, true, "its lease expired (test)")
	}); err != nil {
		t.Fatal(err)
	}
	h := l.head(t)
	if _, code := l.report(t, w1, "w1", `{"execution":"`+id+`","status":"running"}`); code != 409 {
		t.Errorf("the lost incarnation's running report: %d, want 409", code)
	}
	var batch struct {
		Results []struct {
			Problem *struct{ Status int } `json:"problem"`
		} `json:"results"`
	}
	if code := l.post(t, w1.Session, "/api/v1/workers/w1/report", `{"reports":[{"execution":"`+id+`","status":"running"}]}`, &batch); code != 200 ||
		len(batch.Results) != 1 || batch.Results[0].Problem == nil || batch.Results[0].Problem.Status != 409 {
		t.Errorf("the lost incarnation's batch: %d %+v, want one 409 problem", code, batch)
	}
	res, code := l.poll(t, w1, `{"wait_seconds":0,"start":true}`)
	if code == 200 && len(res.Assignments) != 0 {
		t.Errorf("a start poll of the lost incarnation started %+v", res.Assignments)
	}
	if got := l.head(t); got != h {
		evs, _ := mem.ReadAll(ctx, h, 100)
		var types []string
		for _, e := range evs {
			types = append(types, e.Stream+" "+e.Type)
		}
		t.Errorf("the lost incarnation's reports and start poll wrote %v", types)
	}
	x, err := repository.LoadExecution(ctx, store, id)
	if err != nil {
		t.Fatal(err)
	}
	if x.Status() != domain.StatusScheduled {
		t.Errorf("the execution is %s, want it still scheduled (for the executor to take back)", x.Status())
	}
}

// verdictBlind is a store whose subscriptions pass over worker.lost: the
// remote service's follower never hears a verdict, so only the fences can
// refuse a lost incarnation's writes.
type verdictBlind struct{ eventstore.Store }

func (v verdictBlind) AtomicMultiStream() bool { return eventstore.AtomicMultiStream(v.Store) }

func (v verdictBlind) Subscribe(ctx context.Context, from uint64, filter eventstore.Filter, handle func([]domain.Envelope) error) error {
	return v.Store.Subscribe(ctx, from, filter, func(batch []domain.Envelope) error {
		kept := slices.DeleteFunc(slices.Clone(batch), func(e domain.Envelope) bool { return e.Type == domain.TypeWorkerLost })
		if len(kept) == 0 {
			return nil
		}
		return handle(kept)
	})
}
