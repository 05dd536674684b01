package worker_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnstile/turnstile/client/worker"
	"github.com/turnstile/turnstile/domain"
)

// TestTraceAcrossRemoteWorker requests an execution with a W3C traceparent
// and runs it on a remote worker (over HTTP, with its own tracer provider,
// as in another process): the worker's run span, the handler's ctx and the
// server's spans (request, execution, grant, handoff, run) are all in the
// caller's trace, the request's event keeps the trace context in its
// metadata, and the run span descends from the server's request span.
func TestTraceAcrossRemoteWorker(t *testing.T) {
	serverSpans := tracetest.NewInMemoryExporter()
	prev := otel.GetTracerProvider()
	stp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(serverSpans))
	otel.SetTracerProvider(stp)
	t.Cleanup(func() { otel.SetTracerProvider(prev); _ = stp.Shutdown(context.Background()) })

	srv := serverForTest(t, 15*time.Second)
	workerSpans := tracetest.NewInMemoryExporter()
	wtp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(workerSpans))
	handlerTrace := make(chan trace.SpanContext, 1)
	w := worker.New(worker.Config{Server: srv.URL, Name: "tw", Slots: 1, Logger: quiet, TracerProvider: wtp})
	w.Handle("traced", func(ctx context.Context, job worker.Job) (any, error) {
		handlerTrace <- trace.SpanContextFromContext(ctx)
		return map[string]int{"ok": 1}, nil
	})
	runWorker(t, w)
	if _, err := do("POST", srv.URL+"/api/v1/actions", `{"ref":"t","runner":"traced"}`, nil); err != nil {
		t.Fatal(err)
	}

	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, _ := http.NewRequest("POST", srv.URL+"/api/v1/executions", strings.NewReader(`{"action":"t","input":{}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	id := strings.TrimPrefix(resp.Header.Get("Location"), "/api/v1/executions/")
	if resp.StatusCode != http.StatusAccepted || id == "" {
		t.Fatalf("request: %d, location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	x, err := srv.waitEnd(id, 10*time.Second)
	if err != nil || x.Status != "completed" {
		t.Fatalf("execution %+v, %v", x, err)
	}
	if sc := <-handlerTrace; sc.TraceID().String() != traceID {
		t.Errorf("the handler's ctx is in trace %s, want %s", sc.TraceID(), traceID)
	}

	// The request's event keeps the trace context (of the server's request span).
	evs, err := srv.Store.ReadStream(context.Background(), domain.ExecutionStream(id), 0, 10)
	if err != nil || len(evs) == 0 {
		t.Fatalf("read the execution's stream: %d events, %v", len(evs), err)
	}
	kept := domain.TraceparentOf(evs[0].Metadata)
	if !strings.HasPrefix(kept, "00-"+traceID+"-") {
		t.Errorf("execution.requested metadata %s keeps traceparent %q, want one in trace %s", evs[0].Metadata, kept, traceID)
	}

	// The server records its spans when the execution ends (after the
	// worker's report was answered): wait for them.
	want := []string{"turnstile.request", "turnstile.execution", "turnstile.grant", "turnstile.handoff", "turnstile.run"}
	byName := map[string]tracetest.SpanStub{}
	deadline := time.Now().Add(10 * time.Second)
	for len(byName) < len(want) && time.Now().Before(deadline) {
		for _, s := range serverSpans.GetSpans() {
			byName[s.Name] = s
		}
		if len(byName) < len(want) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, n := range want {
		s, ok := byName[n]
		if !ok {
			t.Errorf("the server recorded no %s span (it recorded %v)", n, names(serverSpans.GetSpans()))
			continue
		}
		if got := s.SpanContext.TraceID().String(); got != traceID {
			t.Errorf("server span %s is in trace %s, want %s", n, got, traceID)
		}
	}
	if s, ok := byName["turnstile.request"]; ok {
		if p := s.Parent.SpanID().String(); p != callerSpan {
			t.Errorf("the request span's parent is %s, want the caller's %s", p, callerSpan)
		}
		if !strings.Contains(kept, "-"+s.SpanContext.SpanID().String()+"-") {
			t.Errorf("the kept traceparent %q is not the request span's (%s)", kept, s.SpanContext.SpanID())
		}
	}

	var run *tracetest.SpanStub
	for _, s := range workerSpans.GetSpans() {
		if s.Name == "turnstile.run" {
			run = &s
		}
	}
	if run == nil {
		t.Fatalf("the worker recorded no run span (it recorded %v)", names(workerSpans.GetSpans()))
	}
	if got := run.SpanContext.TraceID().String(); got != traceID {
		t.Errorf("the worker's run span is in trace %s, want %s", got, traceID)
	}
	if req, ok := byName["turnstile.request"]; ok && run.Parent.SpanID() != req.SpanContext.SpanID() {
		t.Errorf("the worker's run span's parent is %s, want the server's request span %s", run.Parent.SpanID(), req.SpanContext.SpanID())
	}
	if !run.Parent.IsRemote() {
		t.Error("the worker's run span's parent is not remote: it did not come from the assignment")
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
