package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel"
)

// TestTracesExportOverOTLP starts the exporter serve starts for
// --otlp-endpoint against a stand-in collector: a span reaches its
// /v1/traces as OTLP/HTTP protobuf at the latest when the export stops.
func TestTracesExportOverOTLP(t *testing.T) {
	var posts atomic.Int32
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method == "POST" && r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" && len(body) > 0 {
			posts.Add(1)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer col.Close()
	prev := otel.GetTracerProvider()
	defer otel.SetTracerProvider(prev)
	stop, err := startTraces(context.Background(), col.URL, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	_, span := otel.Tracer("test").Start(context.Background(), "turnstile.request")
	span.End()
	stop()
	if posts.Load() == 0 {
		t.Fatal("the collector received no OTLP/HTTP export")
	}
}

// TestTracesOffByDefault: with no endpoint, the global provider is left
// as it is (otel's no-op), and a bad endpoint is a usage error.
func TestTracesOffByDefault(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	prev := otel.GetTracerProvider()
	stop, err := startTraces(context.Background(), "", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if otel.GetTracerProvider() != prev {
		t.Error("traces off changed the global tracer provider")
	}
	_, span := otel.Tracer("test").Start(context.Background(), "x")
	if span.IsRecording() {
		t.Error("with traces off a span records")
	}
	var u usageError
	if _, err := startTraces(context.Background(), "collector:4318", slog.New(slog.NewTextHandler(io.Discard, nil))); !errors.As(err, &u) {
		t.Errorf("--otlp-endpoint without a scheme: %v, want a usage error", err)
	}
}
