package tracing_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/internal/tracing"
	"github.com/ratchet-mcp/ratchet/internal/tracingtest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestARefusedRequestsFieldsNeverReachSpans: span attributes come from what
// the engine accepted, so what a caller puts in a refused field (any text,
// any length) never reaches the trace backend.
func TestARefusedRequestsFieldsNeverReachSpans(t *testing.T) {
	exp := tracingtest.InMemory(t)
	dir := t.TempDir()
	eng := enginetest.Open(t, dir, ledger.Options{})
	te := tracing.Engine{Engine: eng}
	ctx := context.Background()
	const marker = "PAYLOAD-MARKER card=4242424242424242 to=secret-recipient@example.com"
	big := strings.Repeat("x", 1<<20)
	_, err1 := te.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "k", EffectType: marker, Namespace: marker})
	_, err2 := te.Report(ctx, ledger.ReportRequest{EffectID: big, Outcome: ledger.Outcome(marker)})
	_, err3 := te.Resolve(ctx, ledger.ResolveRequest{EffectID: marker, Resolution: ledger.Outcome(marker)})
	t.Logf("errors: %v | %v | %v", err1 != nil, err2 != nil, err3 != nil)
	for _, s := range exp.GetSpans() {
		for _, a := range s.Attributes {
			v := a.Value.String()
			if strings.Contains(v, "PAYLOAD-MARKER") || len(v) > 4096 {
				t.Errorf("span %s attribute %s = %.80q (len %d), from a refused request", s.Name, a.Key, v, len(v))
			}
		}
	}
}
