package proxy

import (
	"context"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Traces (package internal/tracing turns them on; off, these are
// OpenTelemetry's no-ops and the caller's traceparent header reaches the
// vendor as it came). A vendor request is a server span "proxy <vendor>",
// child of the caller's W3C trace context (its traceparent header); the
// engine's decision spans are its children, and so is the call to the
// vendor, a client span "<vendor> <method>" whose context the vendor
// request carries in its traceparent header, in place of the caller's.
// Attributes name the vendor, the method, the effect type, the decision,
// the effect id and the vendor's status: never the path (it may hold a
// customer's id), the body or a header's value.

// tracer is the global provider's tracer, asked for at each span: one kept
// from package initialisation would stay bound to the first provider ever
// set (otel's global delegation), and a later Setup (a test's second run)
// would never see the proxy's spans.
func tracer() trace.Tracer { return otel.Tracer("github.com/ratchet-mcp/ratchet/proxy") }

// unsetProvider is OpenTelemetry's global tracer provider as it is before
// any is set (its delegating default, "*global.tracerProvider"), or nil if
// one was set before this package was initialised.
var unsetProvider = func() trace.TracerProvider {
	if tp := otel.GetTracerProvider(); fmt.Sprintf("%T", tp) == "*global.tracerProvider" {
		return tp
	}
	return nil
}()

// tracesOff reports whether no tracer provider has been set (package
// internal/tracing sets none when traces are off): every span would be a
// no-op and the caller's traceparent header goes on as it came, so the
// proxy starts none and saves their allocations on every request.
func tracesOff() bool { return unsetProvider != nil && otel.GetTracerProvider() == unsetProvider }

// startSpan starts the span of one vendor request and returns r with it.
func startSpan(r *http.Request, vendor string) (*http.Request, trace.Span) {
	if tracesOff() {
		return r, noSpan
	}
	ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := tracer().Start(ctx, "proxy "+vendor, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("vendor", vendor), attribute.String("http.request.method", r.Method)))
	return r.WithContext(ctx), span
}

// traceDecision records the engine's answer on the request's span.
func traceDecision(ctx context.Context, effectType string, res *ledger.BeginResult) {
	if tracesOff() { // no span to record on, and its attributes would be built all the same
		return
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("effect_type", effectType),
		attribute.String("decision", string(res.Decision)), attribute.String("effect_id", res.EffectID))
}

// tracedTransport is the vendor call: a client span, and its context in
// the request's traceparent header.
type tracedTransport struct {
	rt     http.RoundTripper
	vendor string
}

func traced(rt http.RoundTripper, vendor string) http.RoundTripper {
	if tracesOff() {
		return rt
	}
	return tracedTransport{rt: rt, vendor: vendor}
}

// noSpan is the span of a request while traces are off.
var noSpan = trace.SpanFromContext(context.Background())

func (t tracedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, span := tracer().Start(req.Context(), t.vendor+" "+req.Method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("vendor", t.vendor), attribute.String("http.request.method", req.Method)))
	defer span.End()
	if !span.SpanContext().IsValid() { // traces off: the caller's traceparent, if any, goes on as it came
		return t.rt.RoundTrip(req)
	}
	out := req.Clone(ctx) // a RoundTripper must not change the request it is given
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(out.Header))
	resp, err := t.rt.RoundTrip(out)
	if err != nil {
		span.SetStatus(codes.Error, "no answer from the vendor")
		return resp, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, http.StatusText(resp.StatusCode))
	}
	return resp, nil
}
