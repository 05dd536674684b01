package worker

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnstile/turnstile/client/wire"
)

// Traces: an assignment carries the W3C traceparent its execution was
// requested in; the worker starts the run's span ("turnstile.run") as its
// child, so the handler's ctx carries the caller's trace and a handler's
// own spans join it. With no Config.TracerProvider the global one is used
// (otel's default is a no-op: no cost).

const tracerName = "github.com/turnstile/turnstile/client/worker"

// runSpan starts the span of a's run in ctx.
func (w *Worker) runSpan(ctx context.Context, a wire.Assignment) (context.Context, trace.Span) {
	tp := w.cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if a.Traceparent != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": a.Traceparent})
	}
	return tp.Tracer(tracerName).Start(ctx, "turnstile.run", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("turnstile.execution", a.Execution),
			attribute.String("turnstile.action", a.Action),
			attribute.String("turnstile.runner", a.Runner),
			attribute.Int("turnstile.attempt", a.Attempt),
			attribute.String("turnstile.worker", w.cfg.Name),
		))
}

// endRunSpan ends span with the report the run ended in.
func endRunSpan(span trace.Span, rep *wire.WorkerReport) {
	span.SetAttributes(attribute.String("turnstile.status", rep.Status))
	if rep.Status != wire.ReportCompleted {
		span.SetStatus(codes.Error, rep.Status+": "+rep.Error)
	}
	span.End()
}
