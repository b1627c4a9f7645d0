package ledger_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestAReportOfALargeResultIsKeptAsASummary: an action that succeeded with
// a result over the limit is recorded succeeded (not left to lapse into
// indeterminate): its size, hash and short top-level fields are kept, the
// answer says so, and a duplicate is answered with that summary.
func TestAReportOfALargeResultIsKeptAsASummary(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	req := ledger.BeginRequest{IdempotencyKey: "export:1", EffectType: "report.export", AgentID: "bot"}
	b := h.beginWant(req, ledger.DecisionExecute)
	blob := strings.Repeat("x", 100_000)
	result := `{"id":"exp_1","status":"done","rows":1200,"ok":true,"blob":"` + blob + `","nested":{"a":1}}`
	eff, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: b.EffectID, Attempt: 1, Outcome: ledger.OutcomeSucceeded, Result: json.RawMessage(result)})
	if err != nil {
		t.Fatalf("a report of a %d-byte result was refused: %v", len(result), err)
	}
	if eff.State != ledger.StateSucceeded {
		t.Errorf("state %s, want succeeded", eff.State)
	}
	if !strings.Contains(eff.ResultNote, "over the 65536-byte limit") {
		t.Errorf("!strings.Contains(eff.ResultNote, \"over the 65536-byte limit\"): result_note %q does not say what was kept", eff.ResultNote)
	} else if !strings.Contains(eff.ResultNote, "id, status, ok, rows") {
		t.Errorf("!strings.Contains(eff.ResultNote, \"id, status, ok, rows\"): result_note %q does not say what was kept", eff.ResultNote)
	}
	canon := `{"blob":"` + blob + `","id":"exp_1","nested":{"a":1},"ok":true,"rows":1200,"status":"done"}`
	sum := sha256.Sum256([]byte(canon))
	want := map[string]any{"id": "exp_1", "status": "done", "rows": float64(1200), "ok": true,
		"result_omitted": map[string]any{"bytes": float64(len(canon)), "sha256": hex.EncodeToString(sum[:]), "limit": float64(ledger.MaxResultBytes)}}
	dup := h.beginWant(req, ledger.DecisionDuplicate)
	var got map[string]any
	if err := json.Unmarshal(dup.Result, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("the duplicate's result is\n%v\nwant\n%v", got, want)
	}
	if len(dup.Result) > ledger.MaxResultBytes {
		t.Errorf("kept %d bytes", len(dup.Result))
	}
}

// TestAReportOfALongVendorReferenceIsRecordedWithoutIt: the outcome is
// recorded and the answer says the reference was left out (cut, it would
// name another object).
func TestAReportOfALongVendorReferenceIsRecordedWithoutIt(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	b := h.beginWant(ledger.BeginRequest{IdempotencyKey: "export:4", EffectType: "report.export", AgentID: "bot"}, ledger.DecisionExecute)
	eff, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: b.EffectID, Attempt: 1, Outcome: ledger.OutcomeSucceeded, VendorReference: strings.Repeat("p", 300)})
	if err != nil {
		t.Fatalf("a report with a long vendor_reference was refused: %v", err)
	}
	if eff.State != ledger.StateSucceeded {
		t.Errorf("eff.State != ledger.StateSucceeded: state %s, vendor_reference %q; want succeeded and none", eff.State, eff.VendorReference)
	} else if eff.VendorReference != "" {
		t.Errorf("eff.VendorReference != \"\": state %s, vendor_reference %q; want succeeded and none", eff.State, eff.VendorReference)
	}
	if !strings.Contains(eff.ResultNote, "vendor_reference was 300 characters") {
		t.Errorf("result_note %q does not say the reference was left out", eff.ResultNote)
	}
}

// TestAReportOfALongErrorIsKeptCut: a failure's error text over the limit
// is cut, not refused: the key is freed for a retry as the report said.
func TestAReportOfALongErrorIsKeptCut(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	req := ledger.BeginRequest{IdempotencyKey: "export:2", EffectType: "report.export", AgentID: "bot"}
	b := h.beginWant(req, ledger.DecisionExecute)
	eff, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: b.EffectID, Attempt: 1, Outcome: ledger.OutcomeFailed, Error: strings.Repeat("é", 5000)})
	if err != nil {
		t.Fatalf("a report with a long error was refused: %v", err)
	}
	if eff.State != ledger.StateFailed {
		t.Errorf("state %s, want failed", eff.State)
	}
	if n := len([]rune(eff.Error)); n != ledger.MaxTextLen {
		t.Errorf("kept %d characters of the error, want %d", n, ledger.MaxTextLen)
	}
	if !strings.Contains(eff.ResultNote, "error was 5000 characters") {
		t.Errorf("result_note %q does not say the error was cut", eff.ResultNote)
	}
	h.beginWant(req, ledger.DecisionExecute)
}

// TestAResolveOfALargeResultIsKeptAsASummary: the same for a resolve after
// checking at the vendor.
func TestAResolveOfALargeResultIsKeptAsASummary(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	req := ledger.BeginRequest{IdempotencyKey: "export:3", EffectType: "report.export", AgentID: "bot"}
	b := h.beginWant(req, ledger.DecisionExecute)
	h.report(b.EffectID, ledger.OutcomeUnknown)
	eff, err := h.eng.Resolve(ctx, ledger.ResolveRequest{Namespace: "default", EffectID: b.EffectID, Resolution: ledger.OutcomeSucceeded,
		Result: json.RawMessage(`{"id":"exp_3","blob":"` + strings.Repeat("y", 70_000) + `"}`)})
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if eff.State != ledger.StateSucceeded {
		t.Errorf("eff.State != ledger.StateSucceeded: resolved %s with note %q", eff.State, eff.ResultNote)
	} else if !strings.Contains(eff.ResultNote, "top-level fields id") {
		t.Errorf("!strings.Contains(eff.ResultNote, \"top-level fields id\"): resolved %s with note %q", eff.State, eff.ResultNote)
	}
	// Not JSON is still refused: that is the caller's bug, not a size.
	_, err = h.eng.Report(ctx, ledger.ReportRequest{EffectID: b.EffectID, Outcome: ledger.OutcomeSucceeded, Result: json.RawMessage(`{"id":` + strings.Repeat("1", 70_000))})
	wantCode(t, err, ledger.CodeInvalidArgument)
}
