package ledger_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestAReportOfAnyJSONResultIsRecorded: a report comes after the action
// happened, so a result that is JSON but that Ratchet does not keep as
// canonical JSON (nested deeper than its bound, a repeated member name as
// some vendors send, a number beyond float64) is kept as a summary and the
// effect is recorded succeeded, never left pending to lapse into
// indeterminate.
func TestAReportOfAnyJSONResultIsRecorded(t *testing.T) {
	for name, result := range map[string]string{
		"nested 100 deep":   strings.Repeat(`{"a":`, 100) + `1` + strings.Repeat(`}`, 100),
		"a repeated member": `{"id":"ch_1","status":"ok","status":"ok"}`,
		"a huge number":     `{"id":"ch_1","amount":1e400}`,
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, testRules())
			ctx := context.Background()
			req := ledger.BeginRequest{IdempotencyKey: "export:odd", EffectType: "report.export", AgentID: "bot"}
			b := h.beginWant(req, ledger.DecisionExecute)
			eff, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: b.EffectID, Attempt: 1, Outcome: ledger.OutcomeSucceeded, Result: json.RawMessage(result)})
			if err != nil {
				t.Fatalf("the report was refused after the action happened: %v", err)
			}
			if eff.State != ledger.StateSucceeded {
				t.Errorf("state %s, want succeeded", eff.State)
			}
			if !strings.Contains(eff.ResultNote, "result_omitted") {
				t.Errorf("result_note %q does not say what was kept", eff.ResultNote)
			}
			dup := h.beginWant(req, ledger.DecisionDuplicate)
			var got map[string]any
			if err := json.Unmarshal(dup.Result, &got); err != nil {
				t.Fatalf("the kept result %s: %v", dup.Result, err)
			}
			if _, ok := got["result_omitted"]; !ok {
				t.Errorf("the kept result %s has no result_omitted", dup.Result)
			}
		})
	}
}

// TestAReportWithAVendorsControlCharactersIsRecorded: a vendor's error text
// with a carriage return or an escape, or a vendor reference with a control
// character, does not make the report fail after the action happened: the
// outcome is recorded, and the answer says what was changed or left out.
func TestAReportWithAVendorsControlCharactersIsRecorded(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	req := ledger.BeginRequest{IdempotencyKey: "charge:cr", EffectType: "report.export", AgentID: "bot"}
	b := h.beginWant(req, ledger.DecisionExecute)
	eff, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: b.EffectID, Attempt: 1, Outcome: ledger.OutcomeFailed,
		Error: "card_declined\r\n\x1b[31minsufficient funds\x1b[0m", VendorReference: "ch_1\r\n"})
	if err != nil {
		t.Fatalf("the report was refused after the action happened: %v", err)
	}
	if eff.State != ledger.StateFailed {
		t.Errorf("state %s, want failed", eff.State)
	}
	if strings.ContainsAny(eff.Error, "\r\x1b") {
		t.Errorf("error %q keeps control characters", eff.Error)
	}
	if !strings.Contains(eff.Error, "insufficient funds") {
		t.Errorf("error %q lost the vendor's words", eff.Error)
	}
	if eff.VendorReference != "" {
		t.Errorf("vendor_reference %q kept with a control character", eff.VendorReference)
	}
	if !strings.Contains(eff.ResultNote, "error") {
		t.Errorf("!strings.Contains(eff.ResultNote, \"error\"): result_note %q does not say what was changed", eff.ResultNote)
	} else if !strings.Contains(eff.ResultNote, "vendor_reference") {
		t.Errorf("!strings.Contains(eff.ResultNote, \"vendor_reference\"): result_note %q does not say what was changed", eff.ResultNote)
	}
}
