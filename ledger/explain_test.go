package ledger_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// explainRules: deny, threshold, ceilings (money, count, per dimension),
// required dimensions, an observed rule, and a rule narrowed by vendor.
func explainRules() []ledger.Rule {
	return []ledger.Rule{
		{Match: "payment.*", Ceilings: []ledger.Ceiling{{Name: "daily", LimitMicros: i64(300_000_000), Window: "24h", Per: "global"}}},
		{Match: "payment.charge", ApprovalThresholdMicros: i64(100_000_000), RequireDimensions: []string{"counterparty"},
			Ceilings: []ledger.Ceiling{{Name: "per-payer", LimitMicros: i64(120_000_000), Window: "24h", Per: "dimension:counterparty"}}},
		{Match: "payment.refund", Mode: ledger.ModeObserve, ApprovalThresholdMicros: i64(10_000_000)},
		{Match: "payment.*", Vendor: "adyen", Deny: true},
		{Match: "email.send", Ceilings: []ledger.Ceiling{
			{Name: "mails", LimitCount: i64(1), Window: "1h", Per: "agent"},
			{Name: "per-list", LimitCount: i64(5), Window: "1h", Per: "dimension:list"}}},
		{Match: "db.drop.*", Deny: true},
	}
}

// outcome is what a begin got, compared between Explain and Begin.
type outcome struct {
	Decision ledger.Decision
	Reason   string
	Code     ledger.Code
	Ceiling  string
	Warned   []string
}

func beginOutcome(res *ledger.BeginResult, err error) outcome {
	var o outcome
	if err != nil {
		o.Code = ledger.Classify(err).Code
		return o
	}
	o.Decision, o.Reason = res.Decision, res.Reason
	if res.Ceiling != nil {
		o.Ceiling = res.Ceiling.Name
	}
	if res.DimensionWarning != nil {
		o.Warned = res.DimensionWarning.Ceilings
	}
	return o
}

func explainOutcome(ex *ledger.Explanation) outcome {
	if ex.Error != nil {
		return outcome{Code: ex.Error.Code}
	}
	return beginOutcome(ex.Decision, nil)
}

// TestExplainAgreesWithBegin: for each begin in turn, what Explain says it
// would get is what Begin then gives it, on both backends; and Explain
// records nothing (the begin after it is decided as if it had not run).
func TestExplainAgreesWithBegin(t *testing.T) {
	h := newHarness(t, explainRules())
	ctx := context.Background()
	mail := func(key string, dims map[string]string) ledger.BeginRequest {
		return ledger.BeginRequest{IdempotencyKey: key, EffectType: "email.send", AgentID: "bot", Dimensions: dims}
	}
	refund := ledger.BeginRequest{IdempotencyKey: "r-1", EffectType: "payment.refund", Vendor: "stripe", AgentID: "bot", EstimatedCostMicros: i64(20_000_000)}
	adyen := pay("a-1", "cus_A", 5_000_000)
	adyen.Vendor = "adyen"
	noPayer := pay("np-1", "", 5_000_000)
	noPayer.Dimensions = nil
	noCost := pay("nc-1", "cus_A", 0)
	noCost.EstimatedCostMicros = nil
	cases := []struct {
		name string
		req  ledger.BeginRequest
		want outcome
	}{
		{"under every limit", pay("c-1", "cus_A", 50_000_000), outcome{Decision: ledger.DecisionExecute}},
		{"the same key again", pay("c-1", "cus_A", 50_000_000), outcome{Decision: ledger.DecisionInFlight}},
		{"at the threshold", pay("c-2", "cus_B", 100_000_000), outcome{Decision: ledger.DecisionApprovalRequired}},
		{"over the payer's ceiling", pay("c-3", "cus_A", 80_000_000), outcome{Decision: ledger.DecisionDenied, Reason: ledger.ReasonBudgetExceeded, Ceiling: "per-payer"}},
		{"a required dimension missing", noPayer, outcome{Code: ledger.CodeDimensionRequired}},
		{"a threshold and no cost", noCost, outcome{Code: ledger.CodeCostRequired}},
		{"denied for one vendor", adyen, outcome{Decision: ledger.DecisionDenied, Reason: ledger.ReasonPolicyDenied}},
		{"denied by type", ledger.BeginRequest{IdempotencyKey: "d-1", EffectType: "db.drop.table", AgentID: "bot"}, outcome{Decision: ledger.DecisionDenied, Reason: ledger.ReasonPolicyDenied}},
		{"observed: executes", refund, outcome{Decision: ledger.DecisionExecute}},
		{"a per-dimension ceiling not applied", mail("m-1", nil), outcome{Decision: ledger.DecisionExecute, Warned: []string{"per-list"}}},
		{"a count ceiling spent", mail("m-2", map[string]string{"list": "news"}), outcome{Decision: ledger.DecisionDenied, Reason: ledger.ReasonBudgetExceeded, Ceiling: "mails"}},
		{"invalid input", ledger.BeginRequest{IdempotencyKey: "x", EffectType: "Bad Type"}, outcome{Code: ledger.CodeInvalidArgument}},
		{"the daily ceiling spent", pay("c-4", "cus_C", 99_000_000), outcome{Decision: ledger.DecisionExecute}},
		{"over the daily ceiling", pay("c-5", "cus_D", 99_000_000), outcome{Decision: ledger.DecisionExecute}},
		{"over the daily ceiling at last", pay("c-6", "cus_E", 99_000_000), outcome{Decision: ledger.DecisionDenied, Reason: ledger.ReasonBudgetExceeded, Ceiling: "daily"}},
	}
	for _, c := range cases {
		ex, err := h.eng.Explain(ctx, c.req)
		if err != nil {
			t.Fatalf("%s: explain: %v", c.name, err)
		}
		explained := explainOutcome(ex)
		got := beginOutcome(h.eng.Begin(ctx, c.req))
		if diff := cmp.Diff(got, explained); diff != "" {
			t.Errorf("%s: explain (+) and begin (-) disagree:\n%s", c.name, diff)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s: begin got (+), want (-):\n%s", c.name, diff)
		}
	}
	// The observed refund: explained as what the observed rule would do.
	ex, err := h.eng.Explain(ctx, ledger.BeginRequest{IdempotencyKey: "r-2", EffectType: "payment.refund", Vendor: "stripe", AgentID: "bot", EstimatedCostMicros: i64(20_000_000)})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Observed == nil {
		t.Errorf("ex.Observed == nil: observed refund: %+v, want an observation of approval_required", ex.Observed)
	} else if ex.Observed.Would != ledger.WouldRequireApproval {
		t.Errorf("ex.Observed.Would != ledger.WouldRequireApproval: observed refund: %+v, want an observation of approval_required", ex.Observed)
	}
	if got := ruleIndexes(ex); !slices.Equal(got, []int{0, 2}) {
		t.Errorf("refund rules %v, want [0 2]", got)
	}
	if ex.Rules[1].Mode != ledger.ModeObserve {
		t.Errorf("rule 2 mode %q", ex.Rules[1].Mode)
	}
}

func ruleIndexes(ex *ledger.Explanation) []int {
	var out []int
	for _, r := range ex.Rules {
		out = append(out, r.Index)
	}
	return out
}

// TestExplainShowsCeilingsWithTheirCounts: every ceiling of the matching
// rules, counted as the ledger counts it now, and the threshold and
// dimensions; no effect id or approval is made up for a begin that was
// not recorded.
func TestExplainShowsCeilingsWithTheirCounts(t *testing.T) {
	h := newHarness(t, explainRules())
	ctx := context.Background()
	h.beginWant(pay("c-1", "cus_A", 30_000_000), ledger.DecisionExecute)
	ex, err := h.eng.Explain(ctx, pay("c-2", "cus_B", 100_000_000))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Name       string
		Counted    int64
		NotApplied bool
	}
	var got []row
	for _, c := range ex.Ceilings {
		got = append(got, row{c.Name, c.Counted, c.NotApplied != ""})
	}
	if diff := cmp.Diff([]row{{"daily", 30_000_000, false}, {"per-payer", 0, false}}, got); diff != "" {
		t.Errorf("ceilings (-want +got):\n%s", diff)
	}
	if ex.ThresholdMicros == nil {
		t.Errorf("ex.ThresholdMicros == nil: threshold %v", ex.ThresholdMicros)
	} else if *ex.ThresholdMicros != 100_000_000 {
		t.Errorf("*ex.ThresholdMicros != 100_000_000: threshold %v", ex.ThresholdMicros)
	}
	if !slices.Equal(ex.RequireDimensions, []string{"counterparty"}) {
		t.Errorf("require dimensions %v", ex.RequireDimensions)
	}
	d := ex.Decision
	if d == nil {
		t.Fatalf("d == nil: decision %+v, want approval_required", d)
	}
	if d.Decision != ledger.DecisionApprovalRequired {
		t.Fatalf("d.Decision != ledger.DecisionApprovalRequired: decision %+v, want approval_required", d)
	}
	if d.ApprovalID != "" {
		t.Errorf("d.ApprovalID != \"\": a dry run named approval %q, effect %q that do not exist", d.ApprovalID, d.EffectID)
	} else if d.EffectID != "" {
		t.Errorf("d.EffectID != \"\": a dry run named approval %q, effect %q that do not exist", d.ApprovalID, d.EffectID)
	}
	approvals, err := h.eng.ListApprovals(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(approvals) != 0 {
		t.Errorf("explain recorded approvals %+v", approvals)
	}
	page, err := h.eng.List(ctx, ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Effects) != 1 {
		t.Errorf("%d effects after an explain, want the one begun", len(page.Effects))
	}
}

// TestPerDimensionCeilingNotAppliedIsWarned: a begin of a type with a
// ceiling per dimension that declares no such dimension is told so in
// its answer, and the effect.begun audit record names the ceiling.
func TestPerDimensionCeilingNotAppliedIsWarned(t *testing.T) {
	h := newHarness(t, explainRules())
	res := h.beginWant(ledger.BeginRequest{IdempotencyKey: "m-1", EffectType: "email.send", AgentID: "bot"}, ledger.DecisionExecute)
	w := res.DimensionWarning
	if w == nil {
		t.Fatal("no dimension_warning for a begin that escaped the per-list ceiling")
	}
	if diff := cmp.Diff([]string{"per-list"}, w.Ceilings); diff != "" {
		t.Errorf("ceilings (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"list"}, w.Dimensions); diff != "" {
		t.Errorf("dimensions (-want +got):\n%s", diff)
	}
	// Declared: no warning.
	if res := h.beginWant(ledger.BeginRequest{IdempotencyKey: "m-2", EffectType: "email.send", AgentID: "bot2",
		Dimensions: map[string]string{"list": "news"}}, ledger.DecisionExecute); res.DimensionWarning != nil {
		t.Errorf("warned with the dimension declared: %+v", res.DimensionWarning)
	}
	var begun []ledger.Event
	err := h.eng.Audit(context.Background(), h.clock.Now().Add(-24*time.Hour), h.clock.Now().Add(24*time.Hour), func(r ledger.AuditRecord) error {
		if r.Event.Type == ledger.EventEffectBegun {
			begun = append(begun, r.Event)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(begun) != 2 {
		t.Fatalf("%d effect.begun records, want 2", len(begun))
	}
	if diff := cmp.Diff([]string{"per-list"}, begun[0].NotApplied); diff != "" {
		t.Errorf("audit of the undeclared begin (-want +got):\n%s", diff)
	}
	if begun[1].NotApplied != nil {
		t.Errorf("audit of the declared begin names %v", begun[1].NotApplied)
	}
	b, _ := json.Marshal(res)
	if !json.Valid(b) {
		t.Fatal("answer does not encode")
	}
}

// TestRulesNarrowByVendorAndOperation: a rule with vendor or operation
// applies only to begins that carry them; a rule on an operation's old
// name (the proxy's effect type before the taxonomy) still applies to it.
func TestRulesNarrowByVendorAndOperation(t *testing.T) {
	h := newHarness(t, []ledger.Rule{
		{Match: "payment.refund", Vendor: "stripe", Deny: true},
		{Match: "payment.*", Operation: "square.refunds.*", Deny: true},
		{Match: "paypal.*", Deny: true}, // an old name
	})
	for _, c := range []struct {
		name                        string
		typ, vendor, operation, key string
		want                        ledger.Decision
	}{
		{"stripe's refund", "payment.refund", "stripe", "stripe.refunds.create", "k1", ledger.DecisionDenied},
		{"adyen's refund", "payment.refund", "adyen", "adyen.payments.refund", "k2", ledger.DecisionExecute},
		{"an agent's refund naming no vendor", "payment.refund", "", "", "k3", ledger.DecisionExecute},
		{"square's refund, by operation", "payment.refund", "square", "square.refunds.create", "k4", ledger.DecisionDenied},
		{"square's charge", "payment.charge", "square", "square.payments.create", "k5", ledger.DecisionExecute},
		{"paypal's order, by its old name", "payment.charge", "paypal", "paypal.orders.create", "k6", ledger.DecisionDenied},
	} {
		res, err := h.eng.Begin(context.Background(), ledger.BeginRequest{IdempotencyKey: c.key, EffectType: c.typ, Vendor: c.vendor, Operation: c.operation, AgentID: "bot"})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if res.Decision != c.want {
			t.Errorf("%s: %s, want %s", c.name, res.Decision, c.want)
		}
	}
}
