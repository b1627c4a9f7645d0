package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestARecoveryClaimKeepsTheAttemptFromBeingFreed: while a same-key
// recovery holds its claim on an indeterminate attempt, nobody can resolve
// or report it failed (which would free the key and let a new attempt
// execute while the resend may be executing the old one); the next begin
// stays blocked. A succeeded resolve and the vendor's own record still
// settle it. Released or expired, the claim stops nothing. Only an
// indeterminate attempt can be claimed.
func TestARecoveryClaimKeepsTheAttemptFromBeingFreed(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, testRules())
	r := unknownCharge(t, h, "claim:1")
	if _, err := h.eng.ClaimRecovery(ctx, r.EffectID, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := h.eng.Resolve(ctx, ledger.ResolveRequest{EffectID: r.EffectID, Resolution: ledger.OutcomeFailed, ResolvedBy: "agent"})
	wantCode(t, err, ledger.CodeInvalidStateTransition)
	_, err = h.eng.Report(ctx, ledger.ReportRequest{EffectID: r.EffectID, Outcome: ledger.OutcomeFailed})
	wantCode(t, err, ledger.CodeInvalidStateTransition)
	h.beginWant(pay("claim:1", "acct_1", 40_000_000), ledger.DecisionBlocked)
	if eff := h.get(r.EffectID); eff.State != ledger.StateIndeterminate || eff.Attempt != 1 {
		t.Fatalf("under the claim: %s attempt %d", eff.State, eff.Attempt)
	}
	// Expired: resolvable again.
	h.clock.Advance(time.Minute)
	if eff, err := h.eng.Resolve(ctx, ledger.ResolveRequest{EffectID: r.EffectID, Resolution: ledger.OutcomeFailed, ResolvedBy: "agent"}); err != nil || eff.State != ledger.StateFailed {
		t.Fatalf("after the claim expired: %v %v", eff, err)
	}
	// Released: resolvable again; the vendor's record is never held back.
	r2 := unknownCharge(t, h, "claim:2")
	if _, err := h.eng.ClaimRecovery(ctx, r2.EffectID, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := h.eng.ReleaseRecovery(ctx, r2.EffectID, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: r2.EffectID, Outcome: ledger.OutcomeFailed}); err != nil {
		t.Fatalf("after the release: %v", err)
	}
	r3 := unknownCharge(t, h, "claim:3")
	if _, err := h.eng.ClaimRecovery(ctx, r3.EffectID, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	if res, err := settleByKey(h, r3, ledger.OutcomeFailed); err != nil || !res.Applied {
		t.Fatalf("the vendor's record under a claim: %+v %v", res, err)
	}
	// Only an indeterminate attempt can be claimed.
	_, err = h.eng.ClaimRecovery(ctx, r3.EffectID, 1, time.Minute) // failed now
	wantCode(t, err, ledger.CodeInvalidStateTransition)
	live := h.beginWant(pay("claim:4", "acct_1", 1_000_000), ledger.DecisionExecute) // pending, in its lease
	_, err = h.eng.ClaimRecovery(ctx, live.EffectID, 1, time.Minute)
	wantCode(t, err, ledger.CodeInvalidStateTransition)
	r5 := unknownCharge(t, h, "claim:5")
	_, err = h.eng.ClaimRecovery(ctx, r5.EffectID, 2, time.Minute)
	wantCode(t, err, ledger.CodeInvalidStateTransition)
	_, err = h.eng.ClaimRecovery(ctx, "eff_nope", 1, time.Minute)
	wantCode(t, err, ledger.CodeEffectNotFound)
}
