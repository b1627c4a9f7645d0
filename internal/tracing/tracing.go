// Package tracing turns on OpenTelemetry traces for Ratchet and holds the
// spans that are not an adapter's own: one per engine decision (Engine, a
// wrapper the adapters are given instead of the ledger itself, so the
// ledger does not depend on OpenTelemetry), and the trace ids in log lines
// (LogHandler).
//
// Traces are off unless configured: the tracing block of the config, or
// the standard OTEL_* variables naming an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). The
// exporter is OTLP over HTTP (http/protobuf); it reads the other OTEL_*
// variables itself (headers, timeout, compression, certificates), as the
// SDK reads OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG, OTEL_BSP_* and
// OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES. OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none turns them off. Off, the global tracer is
// OpenTelemetry's no-op, and no span is recorded or sent.
//
// The W3C trace context (traceparent, tracestate) is taken from the caller
// (an MCP request's HTTP headers or its params' _meta; a proxied request's
// headers) and passed on to the vendor, so one trace runs agent → Ratchet
// → vendor. Span attributes hold ids, types, decisions and reasons: never
// payloads, dimension values or tokens, and idempotency keys only when the
// operator opts in (IncludeIdempotencyKeys).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of Ratchet's spans.
const Name = "github.com/ratchet-mcp/ratchet"

// Options configures Setup.
type Options struct {
	// Enabled turns traces on (true) or off (false); nil means on when the
	// OTEL_* variables name an OTLP endpoint.
	Enabled *bool
	// Endpoint is the OTLP/HTTP endpoint URL (e.g.
	// http://otel-collector:4318); empty means the OTEL_* variables', or
	// the exporter's default (http://localhost:4318).
	Endpoint string
	// ServiceVersion is recorded on the resource.
	ServiceVersion string
	// Exporter replaces the OTLP exporter (tests: tracetest's in-memory
	// exporter); with it traces are on whatever Enabled says.
	Exporter sdktrace.SpanExporter
	// Syncer exports each span as it ends rather than in batches (tests).
	Syncer bool
}

// On reports whether opts and the environment turn traces on.
func (o Options) On() bool {
	if o.Exporter != nil {
		return true
	}
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || os.Getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	if o.Enabled != nil {
		return *o.Enabled
	}
	return o.Endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs the global tracer provider and the W3C propagator when
// traces are on, and returns what flushes and stops them (a no-op when
// off). Off, the propagator is left as OpenTelemetry's no-op too, so a
// caller's traceparent reaches the vendor untouched.
func Setup(ctx context.Context, opts Options) (shutdown func(context.Context) error, err error) {
	nop := func(context.Context) error { return nil }
	if !opts.On() {
		return nop, nil
	}
	exp := opts.Exporter
	if exp == nil {
		for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
			if p := os.Getenv(v); p != "" && p != "http/protobuf" {
				return nop, fmt.Errorf("tracing: %s=%s: Ratchet exports traces over OTLP/HTTP only (http/protobuf)", v, p)
			}
		}
		var eo []otlptracehttp.Option
		if opts.Endpoint != "" {
			eo = append(eo, otlptracehttp.WithEndpointURL(opts.Endpoint))
		}
		if exp, err = otlptracehttp.New(ctx, eo...); err != nil {
			return nop, fmt.Errorf("tracing: the OTLP exporter: %w", err)
		}
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "ratchet"), attribute.String("service.version", opts.ServiceVersion)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nop, fmt.Errorf("tracing: the resource: %w", err)
	}
	tpo := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if opts.Syncer {
		tpo = append(tpo, sdktrace.WithSyncer(exp))
	} else {
		tpo = append(tpo, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(tpo...)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, nil
}

// Tracer is Ratchet's tracer (the global provider's).
func Tracer() trace.Tracer { return otel.Tracer(Name) }

// LogHandler adds the trace_id and span_id of the context's span to every
// record logged with a context that has one (the engine logs each decision
// with the caller's context).
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return l.Handler.Handle(ctx, r)
}

func (l logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{l.Handler.WithAttrs(as)}
}
func (l logHandler) WithGroup(name string) slog.Handler { return logHandler{l.Handler.WithGroup(name)} }
