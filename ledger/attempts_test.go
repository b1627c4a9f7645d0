package ledger_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// An operator checking at the vendor gets the key Ratchet handed out with
// each attempt, exactly as the execute answers carried them.
func TestAttemptKeysAreTheKeysHandedOut(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	first := h.beginWant(pay("ak:1", "acct_1", 1000), ledger.DecisionExecute)
	h.report(first.EffectID, ledger.OutcomeFailed)
	second := h.beginWant(pay("ak:1", "acct_1", 1000), ledger.DecisionExecute)
	got, err := h.eng.AttemptKeys(ctx, first.EffectID)
	if err != nil {
		t.Fatal(err)
	}
	want := []ledger.AttemptKey{{Attempt: 1, VendorIdempotencyKey: *first.VendorIdempotencyKey},
		{Attempt: 2, VendorIdempotencyKey: *second.VendorIdempotencyKey}}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("attempt keys shown %+v, want the ones handed out %+v", got, want)
	}
	// An effect that names no vendor has none; an unknown id is not found.
	mail := h.beginWant(ledger.BeginRequest{IdempotencyKey: "ak:mail", EffectType: "email.send", AgentID: "bot"}, ledger.DecisionExecute)
	if got, err := h.eng.AttemptKeys(ctx, mail.EffectID); err != nil || len(got) != 0 {
		t.Errorf("no vendor: %v %v, want none", got, err)
	}
	_, err = h.eng.AttemptKeys(ctx, "eff_nope")
	wantCode(t, err, ledger.CodeEffectNotFound)
}

// The scope an operator looks up by value is the one the ceiling counts
// under; a name that is not lowercase says so.
func TestDimensionScopeFindsTheBudgetRow(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	h.beginWant(pay("ds:1", "acct_9", 1000), ledger.DecisionExecute)
	scope, err := h.eng.DimensionScope("counterparty", "acct_9")
	if err != nil {
		t.Fatal(err)
	}
	budgets, err := h.eng.Budgets(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, b := range budgets {
		if b.Per == "dimension:counterparty" && b.Scope == scope {
			found++
			if b.Counted != 1000 {
				t.Errorf("counted %d, want 1000", b.Counted)
			}
		}
	}
	if found != 1 {
		t.Errorf("%d rows of scope %s, want 1 (budgets %+v)", found, scope, budgets)
	}
	_, err = h.eng.DimensionScope("Counterparty", "acct_9")
	wantCode(t, err, ledger.CodeInvalidArgument)
	_, err = h.eng.DimensionScope("counterparty", "")
	wantCode(t, err, ledger.CodeInvalidArgument)
}
