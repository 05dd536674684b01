package executor

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnstile/turnstile/domain"
)

// Traces: when an execution that carries a trace context (its request's
// traceparent, domain/trace.go) ends, the executor records the server's
// spans of it in the global tracer provider (a no-op unless serve exports
// traces), timed by the log: "turnstile.execution" (request to end) with
// the children "turnstile.grant" (request to grant: the wait in the
// queue), "turnstile.handoff" (grant to the worker's start) and
// "turnstile.run" (start to end), and the event "turnstile.end" with the
// final status. Only a caught-up executor records them (a restart's replay
// of old ends records nothing).

const tracerName = "github.com/turnstile/turnstile/services/executor"

// traceEnded records the spans of x, which has just ended.
func (e *Executor) traceEnded(x *domain.Execution) {
	tp := x.Traceparent()
	if tp == "" || !e.ready.Load() {
		return
	}
	tracer := otel.Tracer(tracerName)
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	req, end := x.RequestedAt(), x.EndedAt()
	ctx, sp := tracer.Start(ctx, "turnstile.execution", trace.WithTimestamp(req), trace.WithAttributes(
		attribute.String("turnstile.execution", x.ID()),
		attribute.String("turnstile.action", x.Action()),
		attribute.String("turnstile.worker", x.Worker()),
		attribute.Int("turnstile.attempt", x.Attempt()),
	))
	if !sp.IsRecording() {
		return
	}
	child := func(name string, from, to time.Time) {
		if from.IsZero() || to.IsZero() || to.Before(from) {
			return
		}
		_, s := tracer.Start(ctx, name, trace.WithTimestamp(from))
		s.End(trace.WithTimestamp(to))
	}
	granted, running := x.GrantedAt(), x.RunningAt()
	child("turnstile.grant", req, granted)
	if running.IsZero() {
		child("turnstile.handoff", granted, end)
	} else {
		child("turnstile.handoff", granted, running)
		child("turnstile.run", running, end)
	}
	status := string(x.Status())
	sp.AddEvent("turnstile.end", trace.WithTimestamp(end), trace.WithAttributes(attribute.String("turnstile.status", status)))
	if x.Status() != domain.StatusCompleted {
		sp.SetStatus(codes.Error, status)
	}
	sp.End(trace.WithTimestamp(end))
}
