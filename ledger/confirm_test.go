package ledger_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

func confirmRules() []ledger.Rule {
	return []ledger.Rule{
		{Match: "payment.*", ConfirmWith: "user", ConfirmThresholdMicros: i64(50_000_000)},
		{Match: "payment.*", ApprovalThresholdMicros: i64(100_000_000)}, // a rule may ask for both
	}
}

// TestAUserConfirmationIsRequiredFromItsThreshold (issue 37 item 4): under
// confirm_with: user from $50, a $10 begin executes; a $60 one without a
// confirmation is refused confirmation_required and records nothing; with
// one it executes and effect.begun records which client answered and how
// soon; a $150 confirmed one still needs an operator. Both backends.
func TestAUserConfirmationIsRequiredFromItsThreshold(t *testing.T) {
	h := newHarness(t, confirmRules())
	ctx := context.Background()
	pay := func(key string, cost int64, conf *ledger.UserConfirmation) (*ledger.BeginResult, error) {
		return h.eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: key, EffectType: "payment.charge", EstimatedCostMicros: i64(cost), Confirmation: conf})
	}
	if r, err := pay("small", 10_000_000, nil); err != nil || r.Decision != ledger.DecisionExecute {
		t.Fatalf("$10: %v %+v", err, r)
	}
	_, err := pay("mid", 60_000_000, nil)
	var le *ledger.Error
	if !errors.As(err, &le) || le.Code != ledger.CodeConfirmationRequired {
		t.Fatalf("$60 unconfirmed: %v, want confirmation_required", err)
	}
	if _, err := h.eng.Get(ctx, "default", "", "mid"); !errors.Is(err, ledger.ErrNotFound) && !isNotFound(err) {
		t.Errorf("the refused begin recorded an effect: %v", err)
	}
	conf := &ledger.UserConfirmation{Client: "claude-code/2.1", AnswerMS: 3}
	r, err := pay("mid", 60_000_000, conf)
	if err != nil || r.Decision != ledger.DecisionExecute {
		t.Fatalf("$60 confirmed: %v %+v", err, r)
	}
	if r, err := pay("big", 150_000_000, conf); err != nil || r.Decision != ledger.DecisionApprovalRequired {
		t.Fatalf("$150 confirmed: %v %+v, want approval_required", err, r)
	}
	recs, _ := auditOf(t, h)
	var got []string
	for _, rec := range recs {
		if rec.Event.Type == ledger.EventEffectBegun && rec.Event.Actor != "" {
			got = append(got, rec.Event.Actor+": "+rec.Event.Note)
		}
	}
	want := []string{"user via client:claude-code/2.1: user confirmation accepted after 3 ms", "user via client:claude-code/2.1: user confirmation accepted after 3 ms"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("effect.begun's confirmations (-want +got):\n%s", diff)
	}
}

func isNotFound(err error) bool {
	var le *ledger.Error
	return errors.As(err, &le) && le.Code == ledger.CodeEffectNotFound
}

func TestConfirmWithIsValidated(t *testing.T) {
	for _, c := range []struct {
		name string
		rule ledger.Rule
		path string
	}{
		{"who", ledger.Rule{Match: "a.*", ConfirmWith: "admin"}, "policies[0].confirm_with"},
		{"observed", ledger.Rule{Match: "a.*", ConfirmWith: "user", Mode: ledger.ModeObserve}, "policies[0].confirm_with"},
		{"threshold alone", ledger.Rule{Match: "a.*", ConfirmThresholdMicros: i64(1)}, "policies[0].confirm_threshold_micros"},
		{"negative", ledger.Rule{Match: "a.*", ConfirmWith: "user", ConfirmThresholdMicros: i64(-1)}, "policies[0].confirm_threshold_micros"},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := ledger.ValidatePolicies([]ledger.Rule{c.rule})
			if len(errs) != 1 || errs[0].Path != c.path {
				t.Fatalf("errors %v, want one at %s", errs, c.path)
			}
		})
	}
}
