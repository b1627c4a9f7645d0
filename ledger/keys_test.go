package ledger_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestEveryStoredKeyHasADocumentedLayout runs a scenario that writes every
// kind of key and checks each key the ledger then holds against the layout
// documented in keys.go.
func TestEveryStoredKeyHasADocumentedLayout(t *testing.T) {
	h := newHarness(t, testRules())
	withThresholds(h, 0.5) // a threshold record
	ctx := context.Background()
	// A group step with a compensation, in a run; an email ceiling per agent.
	s := step("hotel", "hotel.book", &ledger.Compensation{EffectType: "hotel.cancel"})
	s.RunID = "run-1"
	r := h.beginWant(s, ledger.DecisionExecute)
	h.report(r.EffectID, ledger.OutcomeSucceeded) // a finished effect
	h.beginWant(email("mail", "bot"), ledger.DecisionExecute)
	h.beginWant(email("mail-2", "bot"), ledger.DecisionExecute) // half the email rate: a threshold fires
	// An approval, a spend ceiling per counterparty.
	ask := h.beginWant(pay("big", "acct_1", 150_000_000), ledger.DecisionApprovalRequired)
	if _, err := h.eng.Approve(ctx, ask.ApprovalID, "alice", ""); err != nil {
		t.Fatal(err)
	}
	h.beginWant(pay("big", "acct_1", 150_000_000), ledger.DecisionExecute) // a pending lease
	// An unreported expiry.
	sms := h.beginWant(ledger.BeginRequest{IdempotencyKey: "sms", EffectType: "sms.send", AgentID: "bot", LeaseSeconds: 5}, ledger.DecisionExecute)
	h.clock.Advance(10 * time.Second)
	if _, err := h.eng.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	// A recovery claim on it.
	if _, err := h.eng.ClaimRecovery(ctx, sms.EffectID, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := h.eng.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.eng.RedeemState(ctx, "st_1", h.clock.Now().Add(time.Minute)); err != nil { // a redeemed request state
		t.Fatal(err)
	}
	if err := h.eng.PutSinkRef(ctx, "test-sink", ask.ApprovalID, []byte(`{"ts":"1"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.CreateGrant(ctx, ledger.GrantRequest{Namespace: "default", EffectType: "payment.*", AgentID: "bot",
		MaxEffects: i64(1), ExpiresAt: h.clock.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, k := range h.storedKeys("") {
		if why := ledger.KeyLayoutError([]byte(k)); why != "" {
			t.Errorf("key %s: %s", strconv.Quote(k), why)
		}
		seen[k[:1]] = true
	}
	for _, kind := range ledger.KeyKinds() {
		// t, the retention index, is only read: ledgers written before
		// 2026-12-02 hold it (TestPurgeForgetsTheRetentionIndexOfAnOlderLedger).
		if !seen[kind] && !(kind == "s" && testBackend != "postgres") && kind != "t" {
			t.Errorf("the scenario wrote no key of kind %q: the test no longer covers it", kind)
		}
	}
}
