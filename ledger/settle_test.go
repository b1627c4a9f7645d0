package ledger_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// unknownCharge is a $40 charge whose outcome is unknown (reported
// unknown): blocked until someone settles it.
func unknownCharge(t *testing.T, h *harness, key string) *ledger.BeginResult {
	t.Helper()
	r := h.beginWant(pay(key, "acct_1", 40_000_000), ledger.DecisionExecute)
	h.report(r.EffectID, ledger.OutcomeUnknown)
	h.beginWant(pay(key, "acct_1", 40_000_000), ledger.DecisionBlocked)
	return r
}

func settleByKey(h *harness, r *ledger.BeginResult, o ledger.Outcome, mod ...func(*ledger.SettleRequest)) (*ledger.SettleResult, error) {
	req := ledger.SettleRequest{Vendor: "stripe", VendorKey: r.VendorIdempotencyKey.Value, Outcome: o,
		Source: "webhook:stripe", EventID: "evt_1"}
	for _, m := range mod {
		m(&req)
	}
	return h.eng.Settle(context.Background(), req)
}

func TestAVendorRecordSettlesAnUnknownOutcome(t *testing.T) {
	h := newHarness(t, testRules())
	r := unknownCharge(t, h, "settle:1")
	res, err := settleByKey(h, r, ledger.OutcomeSucceeded, func(s *ledger.SettleRequest) {
		s.VendorReference, s.ActualCostMicros = "pi_123", i64(39_000_000)
	})
	if err != nil {
		t.Fatalf("err != nil: settle: %+v %v", res, err)
	}
	if diff := cmp.Diff(settled{Applied: true, State: ledger.StateSucceeded}, settledOf(res)); diff != "" {
		t.Fatalf("settle (-want +got):\n%s\n%+v", diff, res)
	}
	if res.Effect.ResolvedBy != "webhook:stripe" {
		t.Fatalf("res.Effect.ResolvedBy != \"webhook:stripe\": settle: %+v %v", res, err)
	}
	d := h.beginWant(pay("settle:1", "acct_1", 40_000_000), ledger.DecisionDuplicate)
	if d.VendorReference != "pi_123" {
		t.Fatalf("duplicate: %+v", d)
	}
	if got := counted(t, h, "daily-spend"); got != 39_000_000 {
		t.Fatalf("daily-spend counted %d, want the event's 39000000", got)
	}
	// The same record again (a webhook retried) changes nothing.
	if res, err := settleByKey(h, r, ledger.OutcomeSucceeded); err != nil || res.Applied || res.Contradicts {
		t.Fatalf("the record again: %+v %v", res, err)
	}
}

func TestAVendorRecordOfFailureFreesTheKey(t *testing.T) {
	h := newHarness(t, testRules())
	r := unknownCharge(t, h, "settle:2")
	if res, err := settleByKey(h, r, ledger.OutcomeFailed); err != nil || !res.Applied || res.Effect.State != ledger.StateFailed {
		t.Fatalf("settle: %+v %v", res, err)
	}
	if got := counted(t, h, "daily-spend"); got != 0 {
		t.Fatalf("daily-spend counted %d after a failure", got)
	}
	next := h.beginWant(pay("settle:2", "acct_1", 40_000_000), ledger.DecisionExecute)
	if next.Attempt != 2 {
		t.Fatalf("next.Attempt != 2: the next attempt: %+v", next)
	}
	if next.VendorIdempotencyKey.Value == r.VendorIdempotencyKey.Value {
		t.Fatalf("next.VendorIdempotencyKey.Value == r.VendorIdempotencyKey.Value: the next attempt: %+v", next)
	}
	// Then a record that attempt 1 succeeded after all: flagged, and
	// attempt 2 is left alone.
	res, err := settleByKey(h, r, ledger.OutcomeSucceeded)
	if err != nil {
		t.Fatalf("err != nil: a success of the failed attempt: %+v %v", res, err)
	}
	if diff := cmp.Diff(settled{Contradicts: true, State: ledger.StatePending}, settledOf(res)); diff != "" {
		t.Fatalf("a success of the failed attempt (-want +got):\n%s\n%+v", diff, res)
	}
	if !outboxHas(t, h, ledger.EventEffectContradicted) {
		t.Fatal("no effect.contradicted event for the operator")
	}
}

func TestAVendorRecordThatContradictsAReportChangesNothing(t *testing.T) {
	h := newHarness(t, testRules())
	r := h.beginWant(pay("settle:3", "acct_1", 40_000_000), ledger.DecisionExecute)
	h.report(r.EffectID, ledger.OutcomeSucceeded)
	res, err := settleByKey(h, r, ledger.OutcomeFailed)
	if err != nil {
		t.Fatalf("err != nil: settle: %+v %v", res, err)
	}
	if !res.Contradicts {
		t.Fatalf("!res.Contradicts: settle: %+v %v", res, err)
	}
	if res.Applied {
		t.Fatalf("res.Applied: settle: %+v %v", res, err)
	}
	if res.Effect.State != ledger.StateSucceeded {
		t.Fatalf("res.Effect.State != ledger.StateSucceeded: settle: %+v %v", res, err)
	}
	if got := counted(t, h, "daily-spend"); got != 40_000_000 {
		t.Fatalf("a contradicting record moved the spend: %d", got)
	}
	if !outboxHas(t, h, ledger.EventEffectContradicted) {
		t.Fatal("no effect.contradicted event for the operator")
	}
	_, err = h.eng.Settle(context.Background(), ledger.SettleRequest{Vendor: "stripe", VendorKey: "not-a-key-we-gave", Outcome: ledger.OutcomeSucceeded, Source: "webhook:stripe"})
	wantCode(t, err, ledger.CodeEffectNotFound)
}

func outboxHas(t *testing.T, h *harness, typ string) bool {
	t.Helper()
	all, err := h.eng.Outbox(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range all {
		if en.Event.Type == typ {
			return true
		}
	}
	return false
}

// TestSettlementsReportsAndRetriesNeverExecuteTwice races, on one effect
// whose lease has run out, vendor records, the agent's late report and
// retried begins: no begin executes, and the effect ends succeeded once.
func TestSettlementsReportsAndRetriesNeverExecuteTwice(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	r := h.beginWant(pay("settle:race", "acct_1", 40_000_000), ledger.DecisionExecute)
	h.clock.Advance(2 * time.Minute)
	var wg sync.WaitGroup
	var executes, applied atomic.Int32
	for i := range 48 {
		wg.Go(func() {
			switch i % 3 {
			case 0:
				if res, err := settleByKey(h, r, ledger.OutcomeSucceeded); err != nil {
					t.Error(err)
				} else if res.Applied {
					applied.Add(1)
				}
			case 1:
				h.eng.Report(ctx, ledger.ReportRequest{EffectID: r.EffectID, Attempt: 1, Outcome: ledger.OutcomeSucceeded})
			case 2:
				res, err := h.eng.Begin(ctx, pay("settle:race", "acct_1", 40_000_000))
				if err != nil {
					t.Error(err)
				} else if res.Decision == ledger.DecisionExecute {
					executes.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if executes.Load() != 0 {
		t.Fatalf("executes.Load() != 0: %d executes, %d settlements applied", executes.Load(), applied.Load())
	}
	if applied.Load() > 1 {
		t.Fatalf("applied.Load() > 1: %d executes, %d settlements applied", executes.Load(), applied.Load())
	}
	if eff := h.get(r.EffectID); eff.State != ledger.StateSucceeded || eff.Attempt != 1 {
		t.Fatalf("after the race: %+v", eff)
	}
}

// TestThePurgeTakesAnEffectsVendorKeys: every attempt's vendor key index
// goes with the effect, and a record naming one is then not found.
func TestThePurgeTakesAnEffectsVendorKeys(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	first := h.beginWant(pay("purge:v", "acct_1", 1_000_000), ledger.DecisionExecute)
	h.report(first.EffectID, ledger.OutcomeFailed)
	second := h.beginWant(pay("purge:v", "acct_1", 1_000_000), ledger.DecisionExecute)
	h.report(second.EffectID, ledger.OutcomeSucceeded, func(r *ledger.ReportRequest) { r.Attempt = 2 })
	if n := len(h.storedKeys("v\x00")); n != 2 {
		t.Fatalf("%d vendor key indexes, want one per attempt", n)
	}
	h.clock.Advance(721 * time.Hour)
	if n, err := h.eng.Purge(ctx); n != 1 || err != nil {
		t.Fatalf("purge = %d, %v", n, err)
	}
	if left := h.storedKeys("v\x00"); len(left) != 0 {
		t.Fatalf("vendor key indexes left after the purge: %q", left)
	}
	_, err := settleByKey(h, second, ledger.OutcomeSucceeded)
	wantCode(t, err, ledger.CodeEffectNotFound)
}

// TestASettlementKeepsTheVendorsAnswer: a vendor's record may carry its
// answer, kept for duplicates as a report's; an agreeing record or report
// fills in the answer of a success settled without one, and never
// replaces one.
func TestASettlementKeepsTheVendorsAnswer(t *testing.T) {
	h := newHarness(t, testRules())
	r := unknownCharge(t, h, "settle:answer")
	if res, err := settleByKey(h, r, ledger.OutcomeSucceeded); err != nil || !res.Applied {
		t.Fatalf("settle without an answer: %+v %v", res, err)
	}
	if d := h.beginWant(pay("settle:answer", "acct_1", 40_000_000), ledger.DecisionDuplicate); d.Result != nil {
		t.Fatalf("an answer from nowhere: %s", d.Result)
	}
	if res, err := settleByKey(h, r, ledger.OutcomeSucceeded, func(s *ledger.SettleRequest) { s.Result = []byte(`{"id":"pi_1"}`) }); err != nil || res.Applied {
		t.Fatalf("the record again, with its answer: %+v %v", res, err)
	}
	h.report(r.EffectID, ledger.OutcomeSucceeded, func(rr *ledger.ReportRequest) { rr.Result = []byte(`{"id":"other"}`) })
	if d := h.beginWant(pay("settle:answer", "acct_1", 40_000_000), ledger.DecisionDuplicate); string(d.Result) != `{"id":"pi_1"}` {
		t.Fatalf("the kept answer: %s", d.Result)
	}
	r2 := unknownCharge(t, h, "settle:answer2")
	settleByKey(h, r2, ledger.OutcomeSucceeded)
	h.report(r2.EffectID, ledger.OutcomeSucceeded, func(rr *ledger.ReportRequest) { rr.Result = []byte(`{"id":"pi_2"}`) })
	if d := h.beginWant(pay("settle:answer2", "acct_1", 40_000_000), ledger.DecisionDuplicate); string(d.Result) != `{"id":"pi_2"}` {
		t.Fatalf("the late report's answer: %s", d.Result)
	}
	_, err := settleByKey(h, r, ledger.OutcomeSucceeded, func(s *ledger.SettleRequest) { s.Result = []byte(`{not json`) })
	wantCode(t, err, ledger.CodeInvalidArgument)
}

// settled is what a settlement's answer is checked for.
type settled struct {
	Applied, Contradicts bool
	State                ledger.State
}

func settledOf(res *ledger.SettleResult) settled {
	return settled{res.Applied, res.Contradicts, res.Effect.State}
}
