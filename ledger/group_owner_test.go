package ledger_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// tripStep is a step of alice's trip group, undone by cancelling it.
func tripStep(key, agent string) ledger.BeginRequest {
	return ledger.BeginRequest{IdempotencyKey: key, EffectType: "hotel.book", GroupKey: "trip:alice", AgentID: agent,
		Compensation: &ledger.Compensation{EffectType: "hotel.cancel", Payload: json.RawMessage(`{"res":"` + key + `"}`), Description: "cancel " + key}}
}

// undoAs is the compensation an unwind handed out, begun as returned by
// agent.
func undoAs(c ledger.CompensationStep, agent string) ledger.BeginRequest {
	return ledger.BeginRequest{IdempotencyKey: c.IdempotencyKey, EffectType: c.EffectType, Vendor: c.Vendor,
		Payload: c.Payload, EstimatedCostMicros: c.EstimatedCostMicros, Description: c.Description,
		CompensatesEffectID: c.CompensatesEffectID, AgentID: agent}
}

func (h *harness) unwind(agent, group string) *ledger.UnwindResult {
	h.t.Helper()
	res, err := h.eng.Unwind(context.Background(), ledger.UnwindRequest{GroupKey: group, AgentID: agent})
	if err != nil {
		h.t.Fatalf("unwind %s as %q: %v", group, agent, err)
	}
	return res
}

// TestAnotherAgentCannotJoinMyGroup: a step begun by another agent (its
// credentials fix it) into my group is refused, so it can neither block my
// unwind nor hold my group back; a new attempt of my failed step by it is
// refused too. My own unwind then runs to unwound.
func TestAnotherAgentCannotJoinMyGroup(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	hotel := h.beginWant(tripStep("hotel", "alice"), ledger.DecisionExecute)
	h.report(hotel.EffectID, ledger.OutcomeSucceeded)
	spa := h.beginWant(tripStep("spa", "alice"), ledger.DecisionExecute)
	h.report(spa.EffectID, ledger.OutcomeFailed)

	_, err := h.eng.Begin(ctx, tripStep("mallory-step", "mallory"))
	wantCode(t, err, ledger.CodeUnauthorized)
	_, err = h.eng.Begin(ctx, tripStep("spa", "mallory")) // a new attempt of alice's failed step
	wantCode(t, err, ledger.CodeUnauthorized)
	if page, _ := h.eng.List(ctx, ledger.Filter{GroupKey: "trip:alice", Namespace: "default"}); len(page.Effects) != 2 {
		t.Errorf("the group has %d steps, want alice's 2", len(page.Effects))
	}

	plan := h.unwind("alice", "trip:alice")
	if len(plan.Compensations) != 1 {
		t.Fatalf("alice's plan: %+v", plan)
	}
	u := h.beginWant(undoAs(plan.Compensations[0], "alice"), ledger.DecisionExecute)
	h.report(u.EffectID, ledger.OutcomeSucceeded)
	if got := h.unwind("alice", "trip:alice").State; got != ledger.GroupUnwound {
		t.Errorf("alice's group is %s, want unwound", got)
	}
}

// TestACallerWhoseCredentialsFixNoAgentActsForTheNamespace: a begin whose
// agent_id is only a label (AgentClaimed, as the MCP tools send for a
// token without an agent) may add to any group and undo any step, as such
// a caller may report and resolve any effect.
func TestACallerWhoseCredentialsFixNoAgentActsForTheNamespace(t *testing.T) {
	h := newHarness(t, testRules())
	hotel := h.beginWant(tripStep("hotel", "alice"), ledger.DecisionExecute)
	h.report(hotel.EffectID, ledger.OutcomeSucceeded)
	helper := tripStep("car", "helper")
	helper.AgentClaimed = true
	car := h.beginWant(helper, ledger.DecisionExecute)
	h.report(car.EffectID, ledger.OutcomeSucceeded)

	plan := h.unwind("", "trip:alice")
	if len(plan.Compensations) != 2 {
		t.Fatalf("plan: %+v", plan)
	}
	for _, c := range plan.Compensations {
		undo := undoAs(c, "")
		undo.AgentClaimed = true
		u := h.beginWant(undo, ledger.DecisionExecute)
		h.report(u.EffectID, ledger.OutcomeSucceeded)
	}
	if got := h.unwind("", "trip:alice").State; got != ledger.GroupUnwound {
		t.Errorf("group is %s, want unwound", got)
	}
}

// TestAnUndoKeyCannotBeTakenFirst: an ordinary begin under the key an undo
// used to get ("undo:" and its step's key) takes nothing from the undo: the
// unwind hands out a key derived with the server secret, and the group
// reaches unwound.
func TestAnUndoKeyCannotBeTakenFirst(t *testing.T) {
	h := newHarness(t, testRules())
	hotel := h.beginWant(tripStep("hotel", "alice"), ledger.DecisionExecute)
	h.report(hotel.EffectID, ledger.OutcomeSucceeded)
	squat := ledger.BeginRequest{IdempotencyKey: "undo:hotel", EffectType: "email.send", AgentID: "mallory"}
	h.report(h.beginWant(squat, ledger.DecisionExecute).EffectID, ledger.OutcomeSucceeded)

	plan := h.unwind("alice", "trip:alice")
	c := plan.Compensations[0]
	if c.IdempotencyKey == "undo:hotel" {
		t.Errorf("c.IdempotencyKey == \"undo:hotel\": undo key %q, want a derived undo: key", c.IdempotencyKey)
	} else if !strings.HasPrefix(c.IdempotencyKey, "undo:") {
		t.Errorf("!strings.HasPrefix(c.IdempotencyKey, \"undo:\"): undo key %q, want a derived undo: key", c.IdempotencyKey)
	}
	if again := h.unwind("alice", "trip:alice").Compensations[0].IdempotencyKey; again != c.IdempotencyKey {
		t.Errorf("a second unwind hands out %q, the first %q", again, c.IdempotencyKey)
	}
	u := h.beginWant(undoAs(c, "alice"), ledger.DecisionExecute)
	h.report(u.EffectID, ledger.OutcomeSucceeded)
	if got := h.unwind("alice", "trip:alice").State; got != ledger.GroupUnwound {
		t.Errorf("group is %s, want unwound", got)
	}
	// The same step's key in another ledger (another secret) undoes under
	// another key: it cannot be guessed from the step's key.
	other := newHarness(t, testRules())
	o := other.beginWant(tripStep("hotel", "alice"), ledger.DecisionExecute)
	other.report(o.EffectID, ledger.OutcomeSucceeded)
	if k := other.unwind("alice", "trip:alice").Compensations[0].IdempotencyKey; k == c.IdempotencyKey {
		t.Errorf("two ledgers derive the same undo key %q", k)
	}
}

// TestUndoKeysHandedOutBeforeTheUpgradeStillUndoOnce: a compensation begun
// under an old-style key before the upgrade keeps that key (a retry of it
// is the same undo, never a second one); a step whose undo was not begun
// yet gets a derived key, and a begin with the old one is told which.
func TestUndoKeysHandedOutBeforeTheUpgradeStillUndoOnce(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	ledger.UseLegacyUndoKeys(h.eng, true)
	hotel := h.beginWant(tripStep("hotel", "alice"), ledger.DecisionExecute)
	h.report(hotel.EffectID, ledger.OutcomeSucceeded)
	car := h.beginWant(tripStep("car", "alice"), ledger.DecisionExecute)
	h.report(car.EffectID, ledger.OutcomeSucceeded)
	old := map[string]ledger.CompensationStep{}
	for _, c := range h.unwind("alice", "trip:alice").Compensations {
		old[c.CompensatesEffectID] = c
	}
	if k := old[hotel.EffectID].IdempotencyKey; k != "undo:hotel" {
		t.Fatalf("the old version hands out %q", k)
	}
	began := h.beginWant(undoAs(old[hotel.EffectID], "alice"), ledger.DecisionExecute) // in flight across the upgrade
	h.reopen()                                                                         // the new version: derived keys

	plan := map[string]ledger.CompensationStep{}
	for _, c := range h.unwind("alice", "trip:alice").Compensations {
		plan[c.CompensatesEffectID] = c
	}
	if k := plan[hotel.EffectID].IdempotencyKey; k != "undo:hotel" {
		t.Errorf("the undo begun before the upgrade is handed out as %q, want its key undo:hotel", k)
	}
	if k := plan[car.EffectID].IdempotencyKey; k == "undo:car" {
		t.Errorf("an undo not begun before the upgrade keeps the guessable key %q", k)
	}
	if r := h.beginWant(undoAs(old[hotel.EffectID], "alice"), ledger.DecisionInFlight); r.EffectID != began.EffectID {
		t.Errorf("the retried undo is effect %s, want %s", r.EffectID, began.EffectID)
	}
	_, err := h.eng.Begin(ctx, undoAs(old[car.EffectID], "alice"))
	wantCode(t, err, ledger.CodeInvalidArgument)
	if err != nil && !strings.Contains(err.Error(), plan[car.EffectID].IdempotencyKey) {
		t.Errorf("the refusal %q does not name the key to use", err)
	}
	h.report(began.EffectID, ledger.OutcomeSucceeded)
	u := h.beginWant(undoAs(plan[car.EffectID], "alice"), ledger.DecisionExecute)
	h.report(u.EffectID, ledger.OutcomeSucceeded)
	if got := h.unwind("alice", "trip:alice").State; got != ledger.GroupUnwound {
		t.Errorf("group is %s, want unwound", got)
	}
}

// TestAnotherAgentCannotPerformMyCompensation: with my group unwinding,
// another agent's begin of my step's compensation (as the unwind returned
// it) is refused, and so is its report of mine: my step is compensated
// only by my own undo.
func TestAnotherAgentCannotPerformMyCompensation(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	hotel := h.beginWant(tripStep("hotel", "alice"), ledger.DecisionExecute)
	h.report(hotel.EffectID, ledger.OutcomeSucceeded)
	c := h.unwind("alice", "trip:alice").Compensations[0]

	_, err := h.eng.Begin(ctx, undoAs(c, "mallory"))
	wantCode(t, err, ledger.CodeUnauthorized)
	if eff := h.get(hotel.EffectID); eff.State != ledger.StateSucceeded {
		t.Errorf("alice's step is %s after mallory's undo, want succeeded", eff.State)
	}
	u := h.beginWant(undoAs(c, "alice"), ledger.DecisionExecute)
	_, err = h.eng.Report(ctx, ledger.ReportRequest{EffectID: u.EffectID, Attempt: 1, Outcome: ledger.OutcomeSucceeded, AgentID: "mallory"})
	wantCode(t, err, ledger.CodeUnauthorized)
	if eff := h.get(hotel.EffectID); eff.State != ledger.StateSucceeded {
		t.Errorf("alice's step is %s after mallory's report, want succeeded", eff.State)
	}
	// Nor may it put its own undo into alice's group to hold it back.
	mine := ledger.BeginRequest{IdempotencyKey: "m1", EffectType: "hotel.book", GroupKey: "trip:mallory", AgentID: "mallory",
		Compensation: &ledger.Compensation{EffectType: "hotel.cancel"}}
	m := h.beginWant(mine, ledger.DecisionExecute)
	h.report(m.EffectID, ledger.OutcomeSucceeded)
	mc := h.unwind("mallory", "trip:mallory").Compensations[0]
	into := undoAs(mc, "mallory")
	into.GroupKey = "trip:alice"
	_, err = h.eng.Begin(ctx, into)
	wantCode(t, err, ledger.CodeInvalidArgument)
}

// TestAnUndoSkipsChecksOnlyUpToItsStepsCheckedCost: a step estimated at
// $5 and reported at $10,000 does not let a $10,000 undo skip the approval
// threshold and ceilings; an undo up to the $5 still does.
func TestAnUndoSkipsChecksOnlyUpToItsStepsCheckedCost(t *testing.T) {
	h := newHarness(t, testRules())
	small := pay("order:2", "acct_9", 5_000_000)
	small.GroupKey = "order:2"
	small.Compensation = &ledger.Compensation{EffectType: "payment.refund", Vendor: "stripe", EstimatedCostMicros: i64(5_000_000)}
	s2 := h.beginWant(small, ledger.DecisionExecute)
	h.report(s2.EffectID, ledger.OutcomeSucceeded)
	h.beginWant(undoAs(h.unwind("bot", "order:2").Compensations[0], "bot"), ledger.DecisionExecute)

	step := pay("order:1", "acct_9", 5_000_000)
	step.GroupKey = "order:1"
	step.Compensation = &ledger.Compensation{EffectType: "payment.charge", Vendor: "stripe",
		Payload: json.RawMessage(`{"to":"acct_mallory"}`), EstimatedCostMicros: i64(10_000_000_000)}
	s := h.beginWant(step, ledger.DecisionExecute)
	h.report(s.EffectID, ledger.OutcomeSucceeded, func(r *ledger.ReportRequest) { r.ActualCostMicros = i64(10_000_000_000) })
	c := h.unwind("bot", "order:1").Compensations[0]
	undo := undoAs(c, "bot")
	undo.Dimensions = map[string]string{"counterparty": "acct_mallory"}
	if r := h.begin(undo); r.Decision == ledger.DecisionExecute {
		t.Fatalf("a $10,000 undo of a step checked at $5 executes unchecked: %+v", r)
	}
}

// TestTheApproverSeesTheDeclaredCompensation: an approval lists the undo
// its step declared, since approving the step lets that undo skip the
// threshold up to the step's cost.
func TestTheApproverSeesTheDeclaredCompensation(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	big := pay("order:big", "acct_9", 150_000_000)
	big.GroupKey = "order:big"
	big.Compensation = &ledger.Compensation{EffectType: "payment.charge", Vendor: "stripe", EstimatedCostMicros: i64(150_000_000), Description: "charge acct_x"}
	h.beginWant(big, ledger.DecisionApprovalRequired)
	list, err := h.eng.ListApprovals(ctx, "", ledger.ApprovalPending)
	if err != nil {
		t.Fatalf("err != nil: approvals: %+v %v", list, err)
	}
	if len(list) != 1 {
		t.Fatalf("len(list) != 1: approvals: %+v %v", list, err)
	}
	if got := list[0].Compensation; got == nil || got.EffectType != "payment.charge" || got.Description != "charge acct_x" {
		t.Errorf("the approval shows compensation %+v, want the declared payment.charge", got)
	}
}
