package api

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnstile/turnstile/domain"
)

// Traces (API.md): a request for an execution may carry a W3C traceparent
// header. The API starts the request's span ("turnstile.request") as its
// child, in the global tracer provider (a no-op unless serve exports
// traces), and the execution keeps the trace context the later spans
// descend from: the request span's when it records, else the header's. An
// invalid header is ignored (W3C: start afresh), never refused.

const tracerName = "github.com/turnstile/turnstile/api"

// requestSpan starts the span of r's request for an execution. tp is the
// traceparent the execution keeps ("" for none).
func requestSpan(r *http.Request) (ctx context.Context, span trace.Span, tp string) {
	ctx = r.Context()
	in := r.Header.Get("traceparent")
	if domain.ValidTraceparent(in) {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(r.Header))
	} else {
		in = ""
	}
	ctx, span = otel.Tracer(tracerName).Start(ctx, "turnstile.request", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.route", "/api/v1/executions")))
	tp = in
	if span.SpanContext().IsValid() && span.IsRecording() {
		c := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, c)
		if v := c["traceparent"]; domain.ValidTraceparent(v) {
			tp = v
		}
	}
	return ctx, span, tp
}
