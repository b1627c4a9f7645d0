// Package tracingtest turns traces on for one test with the OpenTelemetry
// SDK's in-memory exporter, and off again after it. It is used by tests
// only, so the binary links no test exporter.
package tracingtest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ratchet-mcp/ratchet/internal/tracing"
)

// InMemory sets tracing up with an in-memory exporter (spans exported as
// they end) and returns it; when the test ends the provider is shut down
// and the globals are reset, so the next test starts with traces off.
func InMemory(t testing.TB) *tracetest.InMemoryExporter {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	stop, err := tracing.Setup(context.Background(), tracing.Options{Exporter: exp, Syncer: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop(context.Background())
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	})
	return exp
}
