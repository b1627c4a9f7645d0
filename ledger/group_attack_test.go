package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestAStepLabelledAnotherAgentDoesNotBlockTheOwnersUnwind: a caller whose
// credentials fix no agent (a namespace token) may add to any group, under
// any agent label; a step it adds to alice's group under another label does
// not make alice's unwind unauthorized, and alice, whose group it is, may
// undo it, so her group reaches unwound.
func TestAStepLabelledAnotherAgentDoesNotBlockTheOwnersUnwind(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	hotel := h.beginWant(tripStep("hotel", "alice"), ledger.DecisionExecute)
	h.report(hotel.EffectID, ledger.OutcomeSucceeded)
	other := tripStep("car", "mallory")
	other.AgentClaimed = true
	car := h.beginWant(other, ledger.DecisionExecute)
	h.report(car.EffectID, ledger.OutcomeSucceeded)

	plan, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "trip:alice", AgentID: "alice"})
	if err != nil {
		t.Fatalf("alice's unwind of her own group: %v", err)
	}
	if len(plan.Compensations) != 2 {
		t.Fatalf("alice's plan has %d compensations, want 2: %+v", len(plan.Compensations), plan)
	}
	for _, c := range plan.Compensations {
		u, err := h.eng.Begin(ctx, undoAs(c, "alice"))
		if err != nil {
			t.Fatalf("alice's undo of %s: %v", c.CompensatesEffectID, err)
		}
		h.report(u.EffectID, ledger.OutcomeSucceeded)
	}
	if got := h.unwind("alice", "trip:alice").State; got != ledger.GroupUnwound {
		t.Errorf("alice's group is %s, want unwound", got)
	}
	// Mallory's credentials, fixing mallory, still undo nothing of alice's.
	bob := h.beginWant(ledger.BeginRequest{IdempotencyKey: "b1", EffectType: "hotel.book", GroupKey: "trip:bob", AgentID: "bob",
		Compensation: tripStep("b1", "bob").Compensation}, ledger.DecisionExecute)
	h.report(bob.EffectID, ledger.OutcomeSucceeded)
	_, err = h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "trip:bob", AgentID: "mallory"})
	wantCode(t, err, ledger.CodeUnauthorized)
}

// TestRacingAgentsOnANewGroupKeyLeaveItOneAgents: eight token-fixed agents
// begin their first steps under one new group key at once; the group is the
// agent's whose step came first, every other is refused unauthorized, and
// the winner unwinds it to the end.
func TestRacingAgentsOnANewGroupKeyLeaveItOneAgents(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	const n = 8
	var wg sync.WaitGroup
	won := make([]*ledger.BeginResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			agent := fmt.Sprintf("agent%d", i)
			req := tripStep("step:"+agent, agent)
			won[i], errs[i] = h.eng.Begin(ctx, req)
		}()
	}
	wg.Wait()
	winner := ""
	for i := range n {
		switch {
		case errs[i] == nil && won[i].Decision == ledger.DecisionExecute:
			if winner != "" {
				t.Errorf("agent%d and %s both began steps in the group", i, winner)
			}
			winner = fmt.Sprintf("agent%d", i)
			h.report(won[i].EffectID, ledger.OutcomeSucceeded)
		default:
			wantCode(t, errs[i], ledger.CodeUnauthorized)
		}
	}
	if winner == "" {
		t.Fatal("no agent's step joined the group")
	}
	plan := h.unwind(winner, "trip:alice")
	if len(plan.Compensations) != 1 {
		t.Fatalf("the winner's plan: %+v", plan)
	}
	u := h.beginWant(undoAs(plan.Compensations[0], winner), ledger.DecisionExecute)
	h.report(u.EffectID, ledger.OutcomeSucceeded)
	if got := h.unwind(winner, "trip:alice").State; got != ledger.GroupUnwound {
		t.Errorf("group is %s, want unwound", got)
	}
}
