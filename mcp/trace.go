package mcp

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Traces (package internal/tracing turns them on; off, these are
// OpenTelemetry's no-ops). Each tool call is a server span "tools/call
// <tool>", child of the caller's W3C trace context: the HTTP request's
// traceparent header, or, over stdio and the bridge, the traceparent in
// the call's params._meta (as MCP clients that trace send it). Its
// attributes name the method and the tool; the engine's decision spans
// below it carry the rest. Arguments are never recorded.

// startToolSpan starts the span of one tool call.
func startToolSpan(ctx context.Context, tool string, req *sdk.CallToolRequest) (context.Context, trace.Span) {
	prop := otel.GetTextMapPropagator()
	if req.Extra != nil && req.Extra.Header != nil {
		ctx = prop.Extract(ctx, propagation.HeaderCarrier(req.Extra.Header))
	}
	if !trace.SpanContextFromContext(ctx).IsValid() && req.Params != nil {
		carrier := propagation.MapCarrier{}
		for _, k := range []string{"traceparent", "tracestate"} {
			if v, ok := req.Params.GetMeta()[k].(string); ok {
				carrier[k] = v
			}
		}
		if len(carrier) > 0 {
			ctx = prop.Extract(ctx, carrier)
		}
	}
	return otel.Tracer("github.com/ratchet-mcp/ratchet/mcp").Start(ctx, "tools/call "+tool,
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.tool.name", tool)))
}

// toolFailed marks a tool call's span failed with the error's stable code.
func toolFailed(span trace.Span, err error) {
	code := string(ledger.CodeOf(err))
	span.SetAttributes(attribute.String("error_code", code))
	span.SetStatus(codes.Error, code)
}

// traceMeta is the trace context of a call's _meta, which the stdio bridge
// passes on to the sidecar (and nothing else of _meta).
func traceMeta(p *sdk.CallToolParamsRaw) sdk.Meta {
	var m sdk.Meta
	for _, k := range []string{"traceparent", "tracestate"} {
		if v, ok := p.GetMeta()[k].(string); ok {
			if m == nil {
				m = sdk.Meta{}
			}
			m[k] = v
		}
	}
	return m
}
