package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
)

// startTraces exports the server's spans (request, grant, handoff, run,
// end: api/trace.go, services/executor/trace.go) over OTLP/HTTP to
// endpoint, a collector's base URL (http://host:4318; an empty path means
// /v1/traces), or when endpoint is "" to OTEL_EXPORTER_OTLP_ENDPOINT's.
// With neither, traces are off: the global tracer provider stays otel's
// no-op and stop does nothing. stop flushes what is batched.
func startTraces(ctx context.Context, endpoint string, log *slog.Logger) (stop func(), err error) {
	var opts []otlptracehttp.Option
	switch {
	case endpoint != "":
		u, err := url.Parse(endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, usageError{fmt.Errorf("--otlp-endpoint %q: want http(s)://host:port[/path]", endpoint)}
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	case os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
		// the exporter reads the environment itself
	default:
		return func() {}, nil
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	res := resource.NewSchemaless(semconv.ServiceName("turnstile"), semconv.ServiceVersion(buildVersion().Version))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	log.Info("exporting traces over OTLP/HTTP", "endpoint", endpoint)
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("traces: flush at stop", "err", err)
		}
	}, nil
}
