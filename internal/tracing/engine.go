package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Engine is the ledger engine with a span around each decision: begin,
// report, resolve and unwind. The adapters (MCP tools, the proxy) are given
// it in place of the engine, so their spans are its spans' parents. Every
// other method is the engine's own.
type Engine struct {
	*ledger.Engine
	// IncludeIdempotencyKeys puts a begin's idempotency key on its span
	// (tracing.include_idempotency_keys); off by default, as a key may
	// name a customer or an order.
	IncludeIdempotencyKeys bool
}

// Span attribute keys of the decision spans (the names).
const (
	AttrNamespace      = "namespace"
	AttrEffectID       = "effect_id"
	AttrEffectType     = "effect_type"
	AttrDecision       = "decision"
	AttrReason         = "reason"
	AttrAttempt        = "attempt"
	AttrState          = "state"
	AttrErrorCode      = "error_code"
	AttrIdempotencyKey = "idempotency_key"
)

// Begin is ledger.Engine.Begin in a span "ratchet.begin".
func (e Engine) Begin(ctx context.Context, req ledger.BeginRequest) (*ledger.BeginResult, error) {
	// Attributes come from what the engine accepted, set after the call:
	// a refused request's fields (which may hold anything a caller sent,
	// of any length) never reach the trace backend.
	ctx, span := Tracer().Start(ctx, "ratchet.begin")
	defer span.End()
	res, err := e.Engine.Begin(ctx, req)
	if err != nil {
		fail(span, err)
		return res, err
	}
	if span.IsRecording() { // off, a begin builds no attributes
		span.SetAttributes(attribute.String(AttrNamespace, ns(req.Namespace)), attribute.String(AttrEffectType, req.EffectType),
			attribute.String(AttrEffectID, res.EffectID), attribute.String(AttrDecision, string(res.Decision)),
			attribute.String(AttrReason, res.Reason), attribute.Int(AttrAttempt, res.Attempt))
		if e.IncludeIdempotencyKeys {
			span.SetAttributes(attribute.String(AttrIdempotencyKey, req.IdempotencyKey))
		}
	}
	return res, nil
}

// Report is ledger.Engine.Report in a span "ratchet.report".
func (e Engine) Report(ctx context.Context, req ledger.ReportRequest) (*ledger.Effect, error) {
	ctx, span := Tracer().Start(ctx, "ratchet.report")
	defer span.End()
	eff, err := e.Engine.Report(ctx, req)
	if err == nil {
		span.SetAttributes(attribute.String("outcome", string(req.Outcome)))
	}
	return eff, effectDone(span, eff, err)
}

// Resolve is ledger.Engine.Resolve in a span "ratchet.resolve".
func (e Engine) Resolve(ctx context.Context, req ledger.ResolveRequest) (*ledger.Effect, error) {
	ctx, span := Tracer().Start(ctx, "ratchet.resolve")
	defer span.End()
	eff, err := e.Engine.Resolve(ctx, req)
	if err == nil {
		span.SetAttributes(attribute.String("resolution", string(req.Resolution)))
	}
	return eff, effectDone(span, eff, err)
}

// Unwind is ledger.Engine.Unwind in a span "ratchet.unwind".
func (e Engine) Unwind(ctx context.Context, req ledger.UnwindRequest) (*ledger.UnwindResult, error) {
	ctx, span := Tracer().Start(ctx, "ratchet.unwind")
	defer span.End()
	res, err := e.Engine.Unwind(ctx, req)
	if err != nil {
		fail(span, err)
	} else {
		span.SetAttributes(attribute.String(AttrNamespace, ns(req.Namespace)))
	}
	return res, err
}

func effectDone(span trace.Span, eff *ledger.Effect, err error) error {
	if err != nil {
		fail(span, err)
		return err
	}
	span.SetAttributes(attribute.String(AttrEffectID, eff.EffectID), attribute.String(AttrNamespace, eff.Namespace),
		attribute.String(AttrEffectType, eff.EffectType), attribute.String(AttrState, string(eff.State)), attribute.Int(AttrAttempt, eff.Attempt))
	return nil
}

// fail marks a span failed with the error's stable code (never its
// message, which may quote input).
func fail(span trace.Span, err error) {
	code := string(ledger.CodeOf(err))
	span.SetAttributes(attribute.String(AttrErrorCode, code))
	span.SetStatus(codes.Error, code)
}

func ns(n string) string {
	if n == "" {
		return ledger.DefaultNamespace
	}
	return n
}
