package ledger_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestAConfirmingClientsNameCannotForgeAuditText (review r37, issue 37
// item 4): the client that answered a confirmation names itself (MCP
// clientInfo, anything it likes); effect.begun's actor carries that name
// with its control and invisible characters (a newline starting a forged
// line in a text listing, a right-to-left override) shown as U+FFFD, as
// every other recorded text is refused them. Both backends.
func TestAConfirmingClientsNameCannotForgeAuditText(t *testing.T) {
	h := newHarness(t, confirmRules())
	conf := &ledger.UserConfirmation{Client: "host/1\nadmin:alice approved\u202eevil\x00", AnswerMS: 2500}
	if _, err := h.eng.Begin(context.Background(), ledger.BeginRequest{IdempotencyKey: "k", EffectType: "payment.charge",
		EstimatedCostMicros: i64(60_000_000), Confirmation: conf}); err != nil {
		t.Fatal(err)
	}
	recs, _ := auditOf(t, h)
	var got []string
	for _, rec := range recs {
		if rec.Event.Type == ledger.EventEffectBegun {
			got = append(got, rec.Event.Actor)
		}
	}
	want := []string{"user via client:host/1\ufffdadmin:alice approved\ufffdevil\ufffd"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("effect.begun's actor (-want +got):\n%s", diff)
	}
}
