package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// These tests are a hostile agent's attempts to get around a control: each
// names the control that must hold.

// counted returns what a ceiling has counted in the namespace "default".
func counted(t *testing.T, h *harness, name string) int64 {
	t.Helper()
	bs, err := h.eng.Budgets(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, b := range bs {
		if b.Name == name {
			n += b.Counted
		}
	}
	return n
}

// unwoundBooking is a group being unwound whose one step, a $50 payment,
// declared a $50 refund as its compensation; it returns the step and the
// compensation the unwind handed out.
func unwoundBooking(t *testing.T, h *harness) (*ledger.BeginResult, ledger.CompensationStep) {
	t.Helper()
	charge := pay("charge:1", "acct_1", 50_000_000)
	charge.GroupKey = "order:1"
	charge.Compensation = &ledger.Compensation{EffectType: "payment.refund", Vendor: "stripe",
		Payload: json.RawMessage(`{"charge":"ch_1"}`), EstimatedCostMicros: i64(50_000_000)}
	c := h.beginWant(charge, ledger.DecisionExecute)
	h.report(c.EffectID, ledger.OutcomeSucceeded)
	res, err := h.eng.Unwind(context.Background(), ledger.UnwindRequest{GroupKey: "order:1"})
	if err != nil {
		t.Fatalf("err != nil: unwind: %+v %v", res, err)
	}
	if len(res.Compensations) != 1 {
		t.Fatalf("len(res.Compensations) != 1: unwind: %+v %v", res, err)
	}
	return c, res.Compensations[0]
}

// undoOf is the begin an agent sends for a compensation exactly as the
// unwind handed it out.
func undoOf(s ledger.CompensationStep) ledger.BeginRequest {
	return ledger.BeginRequest{IdempotencyKey: s.IdempotencyKey, EffectType: s.EffectType, Vendor: s.Vendor,
		Payload: s.Payload, CompensatesEffectID: s.CompensatesEffectID, EstimatedCostMicros: s.EstimatedCostMicros,
		AgentID: "bot", Dimensions: map[string]string{"counterparty": "acct_1"}}
}

func TestCallingAnActionAnUndoUnlocksNoSpending(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	// An unrelated succeeded email, outside any group.
	mail := h.beginWant(ledger.BeginRequest{IdempotencyKey: "mail:1", EffectType: "email.send", AgentID: "bot"}, ledger.DecisionExecute)
	h.report(mail.EffectID, ledger.OutcomeSucceeded)
	_, step := unwoundBooking(t, h)
	before := counted(t, h, "daily-spend")

	big := pay("big-charge", "acct_9", 10_000_000_000) // $10,000: over the threshold and both ceilings
	for name, mod := range map[string]func(*ledger.BeginRequest){
		"target outside any group":    func(r *ledger.BeginRequest) { r.CompensatesEffectID = mail.EffectID },
		"target in a group, key free": func(r *ledger.BeginRequest) { r.CompensatesEffectID = step.CompensatesEffectID },
		"the undo key, another type": func(r *ledger.BeginRequest) {
			r.CompensatesEffectID, r.IdempotencyKey = step.CompensatesEffectID, step.IdempotencyKey
		},
	} {
		t.Run(name, func(t *testing.T) {
			req := big
			mod(&req)
			_, err := h.eng.Begin(ctx, req)
			wantCode(t, err, ledger.CodeInvalidArgument)
			var le *ledger.Error
			errors.As(err, &le)
			if !strings.HasPrefix(le.Field, "compensates_effect_id") && le.Field != "idempotency_key" && le.Field != "effect_type" {
				t.Fatalf("error names field %q: %v", le.Field, err)
			}
		})
	}
	// The declared undo, altered in any of the ways that would let it spend.
	for name, mod := range map[string]func(*ledger.BeginRequest){
		"cost above the declared": func(r *ledger.BeginRequest) { r.EstimatedCostMicros = i64(50_000_001) },
		"no cost":                 func(r *ledger.BeginRequest) { r.EstimatedCostMicros = nil },
		"another vendor":          func(r *ledger.BeginRequest) { r.Vendor = "square" },
		"another payload":         func(r *ledger.BeginRequest) { r.Payload = json.RawMessage(`{"charge":"ch_2"}`) },
		"another key":             func(r *ledger.BeginRequest) { r.IdempotencyKey = "undo:other" },
		"another effect type":     func(r *ledger.BeginRequest) { r.EffectType = "payment.charge" },
	} {
		t.Run(name, func(t *testing.T) {
			req := undoOf(step)
			mod(&req)
			_, err := h.eng.Begin(ctx, req)
			wantCode(t, err, ledger.CodeInvalidArgument)
		})
	}
	if got := counted(t, h, "daily-spend"); got != before {
		t.Fatalf("daily-spend counted %d after refused undos, want %d", got, before)
	}
	// A compensation of an effect whose group is not being unwound.
	charge := pay("charge:2", "acct_2", 10_000_000)
	charge.GroupKey = "order:2"
	charge.Compensation = &ledger.Compensation{EffectType: "payment.refund", Vendor: "stripe", EstimatedCostMicros: i64(10_000_000)}
	c2 := h.beginWant(charge, ledger.DecisionExecute)
	h.report(c2.EffectID, ledger.OutcomeSucceeded)
	early := ledger.BeginRequest{IdempotencyKey: "undo:charge:2", EffectType: "payment.refund", Vendor: "stripe",
		CompensatesEffectID: c2.EffectID, EstimatedCostMicros: i64(10_000_000), AgentID: "bot",
		Dimensions: map[string]string{"counterparty": "acct_2"}}
	_, err := h.eng.Begin(ctx, early)
	wantCode(t, err, ledger.CodeInvalidArgument)

	// The undo exactly as handed out executes, and what it declares counts
	// (a lower cost than declared is fine).
	before = counted(t, h, "daily-spend")
	undo := undoOf(step)
	undo.EstimatedCostMicros = i64(40_000_000)
	h.beginWant(undo, ledger.DecisionExecute)
	if got := counted(t, h, "daily-spend"); got != before+40_000_000 {
		t.Fatalf("daily-spend counted %d after the undo, want %d", got, before+40_000_000)
	}
}

func TestAnUndoKeyTakenByAnOrdinaryBeginIsAConflict(t *testing.T) {
	h := newHarness(t, testRules())
	_, step := unwoundBooking(t, h)
	// The agent first spends under the undo key as an ordinary begin...
	squat := undoOf(step)
	squat.CompensatesEffectID = ""
	s := h.beginWant(squat, ledger.DecisionExecute)
	h.report(s.EffectID, ledger.OutcomeFailed)
	// ...then calls the same key an undo: the key names another effect.
	_, err := h.eng.Begin(context.Background(), undoOf(step))
	wantCode(t, err, ledger.CodeIdempotencyKeyConflict)
}

func TestARetriedReportOfAnOldAttemptNeverSettlesTheNewOne(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	req := ledger.BeginRequest{IdempotencyKey: "mail:retry", EffectType: "email.send", AgentID: "bot"}
	first := h.beginWant(req, ledger.DecisionExecute)
	h.report(first.EffectID, ledger.OutcomeFailed) // attempt 1, no attempt field
	second := h.beginWant(req, ledger.DecisionExecute)
	if second.Attempt != 2 {
		t.Fatalf("second attempt: %+v", second)
	}
	// The agent's client retries its first report (its response was lost).
	_, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: first.EffectID, Outcome: ledger.OutcomeFailed})
	wantCode(t, err, ledger.CodeInvalidArgument)
	_, err = h.eng.Report(ctx, ledger.ReportRequest{EffectID: first.EffectID, Outcome: ledger.OutcomeFailed, Attempt: 1})
	wantCode(t, err, ledger.CodeInvalidStateTransition)
	if eff := h.get(first.EffectID); eff.State != ledger.StatePending || eff.Attempt != 2 {
		t.Fatalf("attempt 2 after stale reports: %+v", eff)
	}
	h.beginWant(req, ledger.DecisionInFlight)
	// The report of attempt 2, naming it, settles it.
	h.report(first.EffectID, ledger.OutcomeSucceeded, func(r *ledger.ReportRequest) { r.Attempt = 2 })
	h.beginWant(req, ledger.DecisionDuplicate)
}

func TestAnApprovalBindsTheCostItApproved(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	req := pay("big:1", "acct_1", 150_000_000)
	ask := h.beginWant(req, ledger.DecisionApprovalRequired)
	if _, err := h.eng.Approve(ctx, ask.ApprovalID, "alice", ""); err != nil {
		t.Fatal(err)
	}
	noCost := req
	noCost.EstimatedCostMicros = nil
	_, err := h.eng.Begin(ctx, noCost)
	wantCode(t, err, ledger.CodeCostRequired)
	if got := counted(t, h, "daily-spend"); got != 0 {
		t.Fatalf("daily-spend counted %d, want 0", got)
	}
	res := h.beginWant(req, ledger.DecisionExecute)
	if res.BudgetWarning != nil {
		t.Fatalf("budget warning on a costed begin: %+v", res.BudgetWarning)
	}
	if got := counted(t, h, "daily-spend"); got != 150_000_000 {
		t.Fatalf("daily-spend counted %d after the approved begin, want 150000000", got)
	}
}

func TestARetryWithoutItsGroupKeyStaysInItsUnwindingGroup(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	req := step("hotel", "hotel.book", nil)
	first := h.beginWant(req, ledger.DecisionExecute)
	h.report(first.EffectID, ledger.OutcomeFailed)
	if _, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: req.GroupKey}); err != nil {
		t.Fatal(err)
	}
	for name, group := range map[string]string{"no group_key": "", "another group_key": "other"} {
		t.Run(name, func(t *testing.T) {
			retry := req
			retry.GroupKey = group
			if d := h.beginWant(retry, ledger.DecisionDenied); d.Reason != ledger.ReasonGroupUnwinding {
				t.Fatalf("retry: %+v", d)
			}
		})
	}
}

func TestVendorKeysCarryTheDigestsFullEntropy(t *testing.T) {
	h := newHarness(t, testRules())
	// A key made from the hex text of a digest has only the bytes of '0'-'9'
	// and 'a'-'f' in it; one made from the digest's bytes almost never does.
	hexText := func(b byte) bool { return b >= '0' && b <= '9' || b >= 'a' && b <= 'f' }
	outside := 0
	for i := range 8 {
		res := h.beginWant(ledger.BeginRequest{IdempotencyKey: "k" + itoa(int64(i)), EffectType: "email.send", Vendor: "stripe", AgentID: "a" + itoa(int64(i))}, ledger.DecisionExecute)
		raw, err := uuidBytes(res.VendorIdempotencyKey.Value)
		if err != nil {
			t.Fatal(err)
		}
		for j, b := range raw {
			if j != 6 && j != 8 && !hexText(b) { // 6 and 8 carry the version and variant
				outside++
			}
		}
	}
	if outside == 0 {
		t.Fatal("every byte of 8 vendor keys is the ASCII of a hex digit: the key is made from hex text")
	}
}

func uuidBytes(u string) ([]byte, error) {
	var out []byte
	h := strings.ReplaceAll(u, "-", "")
	for i := 0; i+1 < len(h); i += 2 {
		var b byte
		for _, c := range h[i : i+2] {
			switch {
			case c >= '0' && c <= '9':
				b = b<<4 | byte(c-'0')
			case c >= 'a' && c <= 'f':
				b = b<<4 | byte(c-'a'+10)
			default:
				return nil, errors.New("not a UUID: " + u)
			}
		}
		out = append(out, b)
	}
	return out, nil
}

func TestApprovalsListAnEffectOnceAfterANewRequest(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	req := pay("big:2", "acct_1", 150_000_000)
	first := h.beginWant(req, ledger.DecisionApprovalRequired)
	h.clock.Advance(25 * time.Hour) // the request expires
	second := h.beginWant(req, ledger.DecisionApprovalRequired)
	if second.ApprovalID == first.ApprovalID {
		t.Fatal("an expired request was not renewed")
	}
	for _, state := range []string{"", ledger.ApprovalPending} {
		as, err := h.eng.ListApprovals(ctx, "", state)
		if err != nil {
			t.Fatal(err)
		}
		if len(as) != 1 {
			t.Fatalf("len(as) != 1: approvals in state %q: %+v", state, as)
		}
		if as[0].ApprovalID != second.ApprovalID {
			t.Fatalf("as[0].ApprovalID != second.ApprovalID: approvals in state %q: %+v", state, as)
		}
	}
}

func TestAnAgentCannotClearItsOwnUnreportedBlock(t *testing.T) {
	h := newHarness(t, testRules()) // sms.*: max_unreported 2
	ctx := context.Background()
	sms := func(k string) ledger.BeginRequest {
		return ledger.BeginRequest{IdempotencyKey: k, EffectType: "sms.send", AgentID: "bot", LeaseSeconds: 10}
	}
	a := h.beginWant(sms("a"), ledger.DecisionExecute)
	b := h.beginWant(sms("b"), ledger.DecisionExecute)
	h.clock.Advance(time.Minute)
	if _, err := h.eng.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	h.beginWant(sms("c"), ledger.DecisionDenied)
	// The agent reports one late and resolves the other itself.
	h.report(a.EffectID, ledger.OutcomeSucceeded)
	if _, err := h.eng.Resolve(ctx, ledger.ResolveRequest{Namespace: "default", EffectID: b.EffectID, Resolution: ledger.OutcomeFailed, ResolvedBy: "agent:bot"}); err != nil {
		t.Fatal(err)
	}
	if d := h.beginWant(sms("c"), ledger.DecisionDenied); d.Reason != ledger.ReasonUnreported {
		t.Fatalf("after the agent's own report and resolve: %+v", d)
	}
	// The late report settled the effect (SPEC 2) all the same.
	if eff := h.get(a.EffectID); eff.State != ledger.StateSucceeded {
		t.Fatalf("late report: %+v", eff)
	}
	// An operator's resolve, agreeing with what the agent reported, clears
	// each mark.
	for _, r := range []struct {
		id  string
		res ledger.Outcome
	}{{a.EffectID, ledger.OutcomeSucceeded}, {b.EffectID, ledger.OutcomeFailed}} {
		if _, err := h.eng.Resolve(ctx, ledger.ResolveRequest{EffectID: r.id, Resolution: r.res, ResolvedBy: "admin:alice"}); err != nil {
			t.Fatal(err)
		}
	}
	res := h.beginWant(sms("c"), ledger.DecisionExecute)
	if res.IntegrationWarning != nil {
		t.Fatalf("integration warning after the operator resolved: %+v", res.IntegrationWarning)
	}
}

func TestAnAgentWhoseTokenFixesItsIDSettlesOnlyItsOwnEffects(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	mine := h.beginWant(ledger.BeginRequest{IdempotencyKey: "mail:mine", EffectType: "email.send", AgentID: "alice-bot"}, ledger.DecisionExecute)
	_, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: mine.EffectID, Outcome: ledger.OutcomeFailed, AgentID: "mallory-bot"})
	wantCode(t, err, ledger.CodeUnauthorized)
	h.clock.Advance(2 * time.Minute) // the lease runs out: now it can be resolved
	_, err = h.eng.Resolve(ctx, ledger.ResolveRequest{Namespace: "default", EffectID: mine.EffectID, Resolution: ledger.OutcomeFailed, AgentID: "mallory-bot"})
	wantCode(t, err, ledger.CodeUnauthorized)
	if eff := h.get(mine.EffectID); eff.State != ledger.StateIndeterminate {
		t.Fatalf("after another agent's calls: %+v", eff)
	}
	// The owner may; so may a caller whose token fixes no agent (the proxy,
	// an operator).
	h.report(mine.EffectID, ledger.OutcomeFailed, func(r *ledger.ReportRequest) { r.AgentID = "alice-bot" })
	// A new attempt by another agent is that agent's to report; the first
	// agent's retried report of its own attempt is stale, not someone
	// else's.
	next := h.beginWant(ledger.BeginRequest{IdempotencyKey: "mail:mine", EffectType: "email.send", AgentID: "bob-bot"}, ledger.DecisionExecute)
	_, err = h.eng.Report(ctx, ledger.ReportRequest{EffectID: next.EffectID, Attempt: 2, Outcome: ledger.OutcomeSucceeded, AgentID: "alice-bot"})
	wantCode(t, err, ledger.CodeUnauthorized)
	_, err = h.eng.Report(ctx, ledger.ReportRequest{EffectID: next.EffectID, Attempt: 1, Outcome: ledger.OutcomeFailed, AgentID: "alice-bot"})
	wantCode(t, err, ledger.CodeInvalidStateTransition)
	h.report(next.EffectID, ledger.OutcomeSucceeded, func(r *ledger.ReportRequest) { r.Attempt, r.AgentID = 2, "bob-bot" })
}

func TestIdempotencyKeysRefuseInvisibleAndBidiCharacters(t *testing.T) {
	h := newHarness(t, testRules())
	for name, k := range map[string]string{
		"zero-width space":          "order-1\u200b",
		"right-to-left mark":        "order-\u200f1",
		"bidi override":             "\u202eorder-1",
		"bidi isolate":              "order\u2066-1",
		"byte order mark":           "\ufefforder-1",
		"soft hyphen":               "or\u00adder-1",
		"combining grapheme joiner": "order-1\u034f",
		"variation selector 16":     "order-1\ufe0f",
		"hangul filler":             "order-1\u3164",
		"braille blank":             "order-1\u2800",
		"decomposed é":              "commande-e\u0301t\u00e9",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := h.eng.Begin(context.Background(), ledger.BeginRequest{IdempotencyKey: k, EffectType: "email.send"})
			wantCode(t, err, ledger.CodeInvalidArgument)
		})
	}
	// Visible non-ASCII text is fine.
	h.beginWant(ledger.BeginRequest{IdempotencyKey: "commande-été-№1", EffectType: "email.send"}, ledger.DecisionExecute)
}

// sms-like rules with a money ceiling and max_unreported.
func markRules() []ledger.Rule {
	return []ledger.Rule{
		{Match: "pay.*", MaxUnreported: 1, MaxLeaseSeconds: 120,
			Ceilings: []ledger.Ceiling{{Name: "pay-spend", LimitMicros: i64(1000), Window: "24h", Per: "global"}}},
		{Match: "sms.*", MaxUnreported: 2, MaxLeaseSeconds: 120},
	}
}

// An agent declares a compensation itself, at begin, on any step, and the
// unwind (an agent's tool) hands that declaration back: a $10,000 charge
// declared as the "undo" of a no-op step, with its cost or without one, is
// checked like any begin, so calling an action an undo still unlocks no
// spending.
func TestAnUndoWorthMoreThanItsStepIsCheckedLikeAnyBegin(t *testing.T) {
	for name, cost := range map[string]*int64{"declaring its cost": i64(10_000_000_000), "declaring no cost": nil} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, testRules())
			ctx := context.Background()
			stepReq := ledger.BeginRequest{IdempotencyKey: "noop:1", EffectType: "noop.step", AgentID: "bot", GroupKey: "g1",
				Compensation: &ledger.Compensation{EffectType: "payment.charge", Vendor: "stripe",
					Payload: json.RawMessage(`{"amount":10000000000}`), EstimatedCostMicros: cost}}
			s := h.beginWant(stepReq, ledger.DecisionExecute)
			h.report(s.EffectID, ledger.OutcomeSucceeded)
			res, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "g1"})
			if err != nil {
				t.Fatalf("err != nil: unwind: %+v %v", res, err)
			}
			if len(res.Compensations) != 1 {
				t.Fatalf("len(res.Compensations) != 1: unwind: %+v %v", res, err)
			}
			undo := undoOf(res.Compensations[0])
			undo.Dimensions = map[string]string{"counterparty": "acct_9"}
			got, err := h.eng.Begin(ctx, undo)
			if err == nil && got.Decision == ledger.DecisionExecute {
				t.Fatalf("a $10,000 payment.charge declared as the compensation of a no-op step executed (budget_warning %v); daily-spend counts %d of 500000000",
					got.BudgetWarning != nil, counted(t, h, "daily-spend"))
			}
		})
	}
}

// An effect that carries an unreported mark and was then compensated can
// never be cleared: the operator's resolve is refused whatever it says, so
// the agent's max_unreported quota is spent for good and the effect is
// never purged.
func TestAnOperatorClearsTheMarkOfACompensatedEffect(t *testing.T) {
	h := newHarness(t, markRules())
	ctx := context.Background()
	req := ledger.BeginRequest{IdempotencyKey: "s1", EffectType: "sms.send", AgentID: "bot", LeaseSeconds: 10, GroupKey: "gs",
		Compensation: &ledger.Compensation{EffectType: "sms.retract"}}
	s := h.beginWant(req, ledger.DecisionExecute)
	h.clock.Advance(time.Minute)
	if _, err := h.eng.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	h.report(s.EffectID, ledger.OutcomeSucceeded) // late, by the agent: the mark stays
	res, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "gs"})
	if err != nil {
		t.Fatalf("err != nil: unwind: %+v %v", res, err)
	}
	if len(res.Compensations) != 1 {
		t.Fatalf("len(res.Compensations) != 1: unwind: %+v %v", res, err)
	}
	u := h.beginWant(undoOf(res.Compensations[0]), ledger.DecisionExecute)
	h.report(u.EffectID, ledger.OutcomeSucceeded)
	if eff := h.get(s.EffectID); eff.State != ledger.StateCompensated {
		t.Fatalf("step: %+v", eff)
	}
	// It happened and was undone: failed contradicts that; succeeded
	// agrees and clears the mark.
	_, err = h.eng.Resolve(ctx, ledger.ResolveRequest{EffectID: s.EffectID, Resolution: ledger.OutcomeFailed, ResolvedBy: "admin:alice"})
	wantCode(t, err, ledger.CodeInvalidStateTransition)
	if _, err := h.eng.Resolve(ctx, ledger.ResolveRequest{EffectID: s.EffectID, Resolution: ledger.OutcomeSucceeded, ResolvedBy: "admin:alice"}); err != nil {
		t.Fatalf("operator resolve succeeded of a compensated effect with an unreported mark: %v", err)
	}
	b := h.beginWant(ledger.BeginRequest{IdempotencyKey: "s2", EffectType: "sms.send", AgentID: "bot"}, ledger.DecisionExecute)
	if b.IntegrationWarning != nil {
		t.Fatalf("after every operator resolve, the agent still carries %d unreported (oldest %s)", b.IntegrationWarning.UnreportedCount, b.IntegrationWarning.OldestEffectID)
	}
}

// The unreported mark goes to the effect's first agent, not to the agent
// that began the attempt that went unreported: another agent in the
// namespace can get a victim blocked, and escapes max_unreported itself.
func TestTheUnreportedMarkGoesToTheAttemptsAgent(t *testing.T) {
	h := newHarness(t, markRules())
	ctx := context.Background()
	for _, k := range []string{"v1", "v2"} {
		req := ledger.BeginRequest{IdempotencyKey: k, EffectType: "sms.send", AgentID: "victim", LeaseSeconds: 10}
		v := h.beginWant(req, ledger.DecisionExecute)
		h.report(v.EffectID, ledger.OutcomeFailed, func(r *ledger.ReportRequest) { r.AgentID = "victim" })
		req.AgentID = "mallory"
		h.beginWant(req, ledger.DecisionExecute) // attempt 2, mallory's; never reported
	}
	h.clock.Advance(time.Minute)
	if _, err := h.eng.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	if d := h.begin(ledger.BeginRequest{IdempotencyKey: "v3", EffectType: "sms.send", AgentID: "victim"}); d.Decision != ledger.DecisionExecute {
		t.Errorf("the victim, who reported every attempt it began, is %s (%s)", d.Decision, d.Reason)
	}
	if d := h.begin(ledger.BeginRequest{IdempotencyKey: "m3", EffectType: "sms.send", AgentID: "mallory"}); d.Decision != ledger.DecisionDenied {
		t.Errorf("mallory, who left 2 attempts unreported (max 2), is %s", d.Decision)
	}
}

// One approval covers any number of attempts while unexpired: each
// failed report releases the spend, and the next begin executes again
// with a new vendor key, no human asked.
func TestAnApprovalCoversOneExecute(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	req := pay("big:retry", "acct_1", 150_000_000)
	ask := h.beginWant(req, ledger.DecisionApprovalRequired)
	if _, err := h.eng.Approve(ctx, ask.ApprovalID, "alice", ""); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	executes := 0
	for i := 1; i <= 5; i++ {
		res := h.begin(req)
		if res.Decision != ledger.DecisionExecute {
			break
		}
		executes++
		keys[res.VendorIdempotencyKey.Value] = true
		h.report(res.EffectID, ledger.OutcomeFailed, func(r *ledger.ReportRequest) { r.Attempt = res.Attempt })
	}
	if executes > 1 {
		t.Fatalf("one approval of $150 executed %d attempts with %d distinct vendor keys; daily-spend counts %d", executes, len(keys), counted(t, h, "daily-spend"))
	}
}

// A compensation declared with payload null is begun without one (or the
// reverse): the agent sends what it was handed out, give or take a null.
func TestACompensationsNullPayloadIsNoPayload(t *testing.T) {
	for name, c := range map[string]struct{ declared, sent json.RawMessage }{
		"declared null, sent none": {json.RawMessage(`null`), nil},
		"declared none, sent null": {nil, json.RawMessage(`null`)},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, testRules())
			ctx := context.Background()
			s := h.beginWant(ledger.BeginRequest{IdempotencyKey: "hotel", EffectType: "hotel.book", AgentID: "bot", GroupKey: "trip",
				Compensation: &ledger.Compensation{EffectType: "hotel.cancel", Payload: c.declared}}, ledger.DecisionExecute)
			h.report(s.EffectID, ledger.OutcomeSucceeded)
			res, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "trip"})
			if err != nil {
				t.Fatalf("err != nil: unwind: %+v %v", res, err)
			}
			if len(res.Compensations) != 1 {
				t.Fatalf("len(res.Compensations) != 1: unwind: %+v %v", res, err)
			}
			undo := undoOf(res.Compensations[0])
			undo.Payload = c.sent
			if _, err := h.eng.Begin(ctx, undo); err != nil {
				t.Fatalf("compensation begun as handed out but for a null payload: %v", err)
			}
		})
	}
}

// The unwind hands out no dimensions, so a compensation begun exactly as
// handed out is refused when its type requires one: undo is not always
// possible.
func TestACompensationTargetsWhomItsStepDid(t *testing.T) {
	h := newHarness(t, testRules())
	_, s := unwoundBooking(t, h)
	undo := undoOf(s)
	undo.Dimensions = nil
	if _, err := h.eng.Begin(context.Background(), undo); err != nil {
		t.Fatalf("a compensation begun exactly as the unwind handed it out: %v", err)
	}
}

// Legit: a compensation that failed is retried (attempt 2) and reported
// with its attempt; the group then unwinds.
func TestAFailedCompensationIsRetried(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	c, s := unwoundBooking(t, h)
	u := h.beginWant(undoOf(s), ledger.DecisionExecute)
	h.report(u.EffectID, ledger.OutcomeFailed)
	u2 := h.beginWant(undoOf(s), ledger.DecisionExecute)
	if u2.Attempt != 2 {
		t.Fatalf("retry: %+v", u2)
	}
	h.report(u2.EffectID, ledger.OutcomeSucceeded, func(r *ledger.ReportRequest) { r.Attempt = 2 })
	if eff := h.get(c.EffectID); eff.State != ledger.StateCompensated {
		t.Fatalf("step: %+v", eff)
	}
	res, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "order:1"})
	if err != nil {
		t.Fatalf("err != nil: unwind: %+v %v", res, err)
	}
	if res.State != ledger.GroupUnwound {
		t.Fatalf("res.State != ledger.GroupUnwound: unwind: %+v %v", res, err)
	}
}

// Races: many goroutines begin the same handed-out compensation and
// the approved key at once; one attempt each.
func TestConcurrentUndosAndApprovedBeginsExecuteOnce(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	_, s := unwoundBooking(t, h)
	req := pay("big:race", "acct_2", 150_000_000)
	ask := h.beginWant(req, ledger.DecisionApprovalRequired)
	if _, err := h.eng.Approve(ctx, ask.ApprovalID, "alice", ""); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	exec := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := undoOf(s)
			name := "undo"
			if i%2 == 1 {
				r, name = req, "approved"
			}
			res, err := h.eng.Begin(ctx, r)
			if err != nil {
				t.Error(err)
				return
			}
			if res.Decision == ledger.DecisionExecute {
				mu.Lock()
				exec[name]++
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if exec["undo"] != 1 {
		t.Fatalf("exec[\"undo\"] != 1: executes: %v", exec)
	}
	if exec["approved"] != 1 {
		t.Fatalf("exec[\"approved\"] != 1: executes: %v", exec)
	}
}

// Resolve has no attempt: a retried resolve "failed" of attempt 1 (its
// response lost) settles attempt 2 once that attempt's lease has run out,
// although attempt 2 may have happened; the next begin executes attempt 3.
func TestARetriedResolveOfAnOldAttemptNeverSettlesTheNewOne(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	req := ledger.BeginRequest{IdempotencyKey: "mail:r", EffectType: "email.send", AgentID: "bot", LeaseSeconds: 10}
	first := h.beginWant(req, ledger.DecisionExecute)
	h.clock.Advance(time.Minute)
	res := ledger.ResolveRequest{Namespace: "default", EffectID: first.EffectID, Resolution: ledger.OutcomeFailed, ResolvedBy: "agent:bot"}
	if _, err := h.eng.Resolve(ctx, res); err != nil { // attempt 1 resolved failed
		t.Fatal(err)
	}
	second := h.beginWant(req, ledger.DecisionExecute) // attempt 2 runs...
	h.clock.Advance(time.Minute)                       // ...and its lease runs out unreported
	if _, err := h.eng.Resolve(ctx, res); err == nil { // the client retries its first resolve
		third := h.begin(req)
		t.Fatalf("a retried resolve of attempt 1 settled attempt %d as failed; the next begin: %s attempt %d", second.Attempt, third.Decision, third.Attempt)
	}
}

// An agent escapes the unreported mark by settling its own expired
// lease before the reaper gets to it (report or resolve): the lease ran out
// without a report all the same.
func TestSettlingALapsedLeaseBeforeTheReaperStillMarksIt(t *testing.T) {
	h := newHarness(t, markRules()) // sms.*: max_unreported 2
	ctx := context.Background()
	sms := func(k string) ledger.BeginRequest {
		return ledger.BeginRequest{IdempotencyKey: k, EffectType: "sms.send", AgentID: "bot", LeaseSeconds: 10}
	}
	a := h.beginWant(sms("a"), ledger.DecisionExecute)
	b := h.beginWant(sms("b"), ledger.DecisionExecute)
	h.clock.Advance(time.Minute) // both leases expired; no reap has run yet
	h.report(a.EffectID, ledger.OutcomeSucceeded)
	if _, err := h.eng.Resolve(ctx, ledger.ResolveRequest{Namespace: "default", EffectID: b.EffectID, Resolution: ledger.OutcomeFailed, ResolvedBy: "agent:bot"}); err != nil {
		t.Fatal(err)
	}
	if d := h.begin(sms("c")); d.Decision == ledger.DecisionExecute && d.IntegrationWarning == nil {
		t.Fatalf("two leases ran out unreported (max_unreported 2), settled by the agent before a reap: no mark, next begin executes")
	}
}

func TestAnAgentWhoseTokenFixesItsIDUnwindsOnlyItsOwnGroups(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	alice := step("hotel", "hotel.book", &ledger.Compensation{EffectType: "hotel.cancel"})
	alice.AgentID = "alice-bot"
	r := h.beginWant(alice, ledger.DecisionExecute)
	h.report(r.EffectID, ledger.OutcomeSucceeded)
	_, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: alice.GroupKey, AgentID: "mallory-bot"})
	wantCode(t, err, ledger.CodeUnauthorized)
	// Nothing changed: alice's next step in the group still executes.
	next := step("car", "car.book", nil)
	next.AgentID = "alice-bot"
	h.beginWant(next, ledger.DecisionExecute)
	if res, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: alice.GroupKey, AgentID: "alice-bot"}); err != nil || res.State != ledger.GroupUnwinding {
		t.Fatalf("the owner's unwind: %+v %v", res, err)
	}
}

// TestAnOperatorOverturnsALateFailedReport: the agent reports an attempt
// failed after its lease ran out (releasing its spend); the operator finds
// it at the vendor: succeeded counts the spend again (past the limit if
// need be) and later begins are duplicates. Only an operator, only for
// such a late word, only while no new attempt began.
func TestAnOperatorOverturnsALateFailedReport(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	req := pay("late", "acct_1", 90_000_000)
	req.LeaseSeconds = 10
	r := h.beginWant(req, ledger.DecisionExecute)
	h.clock.Advance(time.Minute)
	h.report(r.EffectID, ledger.OutcomeFailed) // late, and false
	if got := counted(t, h, "daily-spend"); got != 0 {
		t.Fatalf("after the late failed report daily-spend counts %d", got)
	}
	// Spend what is left of the ceiling meanwhile.
	for i := range 5 {
		s := h.beginWant(pay("other:"+itoa(int64(i)), "acct_"+itoa(int64(i+2)), 90_000_000), ledger.DecisionExecute)
		h.report(s.EffectID, ledger.OutcomeSucceeded)
	}
	// The agent cannot overturn it; the operator can.
	_, err := h.eng.Resolve(ctx, ledger.ResolveRequest{Namespace: "default", EffectID: r.EffectID, Resolution: ledger.OutcomeSucceeded, ResolvedBy: "agent:bot"})
	wantCode(t, err, ledger.CodeInvalidStateTransition)
	eff, err := h.eng.Resolve(ctx, ledger.ResolveRequest{EffectID: r.EffectID, Resolution: ledger.OutcomeSucceeded, VendorReference: "pi_found", ResolvedBy: "admin:alice", Note: "seen in the dashboard"})
	if err != nil {
		t.Fatalf("err != nil: the operator's overturn: %+v %v", eff, err)
	}
	if eff.State != ledger.StateSucceeded {
		t.Fatalf("eff.State != ledger.StateSucceeded: the operator's overturn: %+v %v", eff, err)
	}
	if got := counted(t, h, "daily-spend"); got != 6*90_000_000 {
		t.Fatalf("daily-spend counts %d after the overturn, want %d (past the 500000000 limit: it was spent)", got, 6*90_000_000)
	}
	if d := h.beginWant(req, ledger.DecisionDuplicate); d.VendorReference != "pi_found" {
		t.Fatalf("after the overturn: %+v", d)
	}
	// The ceiling, over its limit, refuses what comes next.
	if d := h.beginWant(pay("next", "acct_8", 1), ledger.DecisionDenied); d.Reason != ledger.ReasonBudgetExceeded {
		t.Fatalf("next: %+v", d)
	}
	if w := h.beginWant(email("clean", "bot"), ledger.DecisionExecute).IntegrationWarning; w != nil {
		t.Fatalf("the mark stayed: %+v", w)
	}
	// A timely failed report is the agent's word: no overturn.
	timely := h.beginWant(email("timely", "bot2"), ledger.DecisionExecute)
	h.report(timely.EffectID, ledger.OutcomeFailed)
	_, err = h.eng.Resolve(ctx, ledger.ResolveRequest{EffectID: timely.EffectID, Resolution: ledger.OutcomeSucceeded, ResolvedBy: "admin:alice"})
	wantCode(t, err, ledger.CodeInvalidStateTransition)
}
