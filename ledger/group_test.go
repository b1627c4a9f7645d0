package ledger_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

func step(key, typ string, comp *ledger.Compensation) ledger.BeginRequest {
	return ledger.BeginRequest{IdempotencyKey: key, EffectType: typ, GroupKey: "booking:trip_1", AgentID: "planner", Compensation: comp}
}

func TestUnwindGroup(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	cancelFlight := &ledger.Compensation{EffectType: "flight.cancel", Vendor: "airline", Payload: json.RawMessage(`{"pnr":"X1"}`), EstimatedCostMicros: i64(0), Description: "cancel PNR X1"}
	cancelHotel := &ledger.Compensation{EffectType: "hotel.cancel", Payload: json.RawMessage(`{"res":"H1"}`)}

	flight := h.beginWant(step("flight", "flight.book", cancelFlight), ledger.DecisionExecute)
	h.report(flight.EffectID, ledger.OutcomeSucceeded)
	h.clock.Advance(time.Second)
	hotel := h.beginWant(step("hotel", "hotel.book", cancelHotel), ledger.DecisionExecute)
	h.report(hotel.EffectID, ledger.OutcomeSucceeded)
	h.clock.Advance(time.Second)
	mail := h.beginWant(step("mail", "email.send", nil), ledger.DecisionExecute)
	h.report(mail.EffectID, ledger.OutcomeSucceeded)
	h.clock.Advance(time.Second)
	car := h.beginWant(step("car", "car.book", nil), ledger.DecisionExecute) // still in flight
	failed := h.beginWant(step("train", "train.book", nil), ledger.DecisionExecute)
	h.report(failed.EffectID, ledger.OutcomeFailed)

	res, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "booking:trip_1", Reason: "user cancelled"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(unwindCounts{ledger.GroupUnwinding, 2, 1, 1}, countsOf(res)); diff != "" {
		t.Fatalf("plan (-want +got):\n%s\n%+v", diff, res)
	}
	// Newest completion first: the hotel, then the flight.
	if c := res.Compensations[0]; c.CompensatesEffectID != hotel.EffectID || !strings.HasPrefix(c.IdempotencyKey, "undo:") || c.EffectType != "hotel.cancel" {
		t.Fatalf("first compensation: %+v", c)
	}
	if c := res.Compensations[1]; c.CompensatesEffectID != flight.EffectID || string(c.Payload) != `{"pnr":"X1"}` || c.Vendor != "airline" || c.Description != "cancel PNR X1" {
		t.Fatalf("second compensation: %+v", c)
	}
	if res.Permanent[0].EffectID != mail.EffectID {
		t.Fatalf("res.Permanent[0].EffectID != mail.EffectID: permanent/unresolved: %+v %+v", res.Permanent, res.Unresolved)
	}
	if res.Unresolved[0].EffectID != car.EffectID {
		t.Fatalf("res.Unresolved[0].EffectID != car.EffectID: permanent/unresolved: %+v %+v", res.Permanent, res.Unresolved)
	}

	// New steps in the group are refused; its undo is not.
	d := h.beginWant(step("extra", "spa.book", nil), ledger.DecisionDenied)
	if d.Reason != ledger.ReasonGroupUnwinding {
		t.Fatalf("new step: %+v", d)
	}
	undo := step(res.Compensations[0].IdempotencyKey, "hotel.cancel", nil)
	undo.Payload = json.RawMessage(`{"res":"H1"}`)
	undo.CompensatesEffectID = hotel.EffectID
	u := h.beginWant(undo, ledger.DecisionExecute)
	h.reopen()
	h.report(u.EffectID, ledger.OutcomeSucceeded)
	if eff := h.get(hotel.EffectID); eff.State != ledger.StateCompensated || eff.CompensatedBy != u.EffectID {
		t.Fatalf("hotel after undo: %+v", eff)
	}
	// The compensated step is a duplicate for its original key.
	if r := h.beginWant(step("hotel", "hotel.book", cancelHotel), ledger.DecisionDuplicate); r.State != ledger.StateCompensated {
		t.Fatalf("original key after undo: %+v", r)
	}

	res, _ = h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "booking:trip_1"})
	if len(res.Compensations) != 1 {
		t.Fatalf("len(res.Compensations) != 1: second call: %+v", res)
	}
	if res.Compensations[0].CompensatesEffectID != flight.EffectID {
		t.Fatalf("res.Compensations[0].CompensatesEffectID != flight.EffectID: second call: %+v", res)
	}
	if res.State != ledger.GroupUnwinding {
		t.Fatalf("res.State != ledger.GroupUnwinding: second call: %+v", res)
	}
	h.report(car.EffectID, ledger.OutcomeFailed)
	undoFlight := ledger.BeginRequest{IdempotencyKey: res.Compensations[0].IdempotencyKey, EffectType: "flight.cancel", Vendor: "airline",
		Payload: json.RawMessage(`{"pnr":"X1"}`), CompensatesEffectID: flight.EffectID, GroupKey: "booking:trip_1", AgentID: "planner"}
	uf := h.beginWant(undoFlight, ledger.DecisionExecute)
	h.report(uf.EffectID, ledger.OutcomeSucceeded)

	res, _ = h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "booking:trip_1"})
	if diff := cmp.Diff(unwindCounts{ledger.GroupUnwound, 0, 1, 0}, countsOf(res)); diff != "" {
		t.Fatalf("final (-want +got):\n%s\n%+v", diff, res)
	}

	_, err = h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "nope"})
	wantCode(t, err, ledger.CodeGroupNotFound)
}

func TestCompensationRules(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	// Fill the global ceiling; a compensation still executes and is counted.
	for i, cp := range []string{"acct_1", "acct_1", "acct_2", "acct_2", "acct_3"} {
		r := h.beginWant(pay("f"+itoa(int64(i)), cp, 99_000_000), ledger.DecisionExecute)
		h.report(r.EffectID, ledger.OutcomeSucceeded)
	}
	charge := pay("f5", "acct_4", 5_000_000)
	charge.GroupKey = "order:f5"
	charge.Compensation = &ledger.Compensation{EffectType: "payment.refund", Vendor: "stripe", EstimatedCostMicros: i64(5_000_000)}
	target := h.beginWant(charge, ledger.DecisionExecute)
	h.report(target.EffectID, ledger.OutcomeSucceeded)
	plan, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "order:f5"})
	if err != nil {
		t.Fatal(err)
	}
	refund := ledger.BeginRequest{IdempotencyKey: plan.Compensations[0].IdempotencyKey, EffectType: "payment.refund", Vendor: "stripe", AgentID: "bot",
		EstimatedCostMicros: i64(5_000_000), // over the full global ceiling; its dimension is its step's
		CompensatesEffectID: target.EffectID}
	r := h.beginWant(refund, ledger.DecisionExecute)
	if got := budgetsByName(t, h)["daily-spend"]; got != 5*99_000_000+5_000_000+5_000_000 {
		t.Fatalf("compensation not counted: %d", got)
	}
	h.report(r.EffectID, ledger.OutcomeSucceeded)

	again := pay("undo2:f5", "acct_4", 1)
	again.CompensatesEffectID = target.EffectID
	_, err = h.eng.Begin(ctx, again)
	wantCode(t, err, ledger.CodeInvalidStateTransition) // already compensated

	// The global ceiling is spent, so the rest uses another effect type.
	pending := h.beginWant(email("g1", "bot"), ledger.DecisionExecute)
	bad := email("undo:g1", "bot")
	bad.CompensatesEffectID = pending.EffectID
	_, err = h.eng.Begin(ctx, bad)
	wantCode(t, err, ledger.CodeInvalidStateTransition) // not succeeded

	self := email("g1", "bot")
	self.CompensatesEffectID = pending.EffectID
	_, err = h.eng.Begin(ctx, self)
	wantCode(t, err, ledger.CodeInvalidArgument) // names itself

	missing := email("g2", "bot")
	missing.CompensatesEffectID = "eff_01NOPE"
	_, err = h.eng.Begin(ctx, missing)
	wantCode(t, err, ledger.CodeEffectNotFound)
}

func TestGroupsAreListedByState(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	for _, g := range []string{"trip:a", "trip:b"} {
		s := step("hotel", "hotel.book", nil)
		s.IdempotencyKey, s.GroupKey = g+":hotel", g
		h.beginWant(s, ledger.DecisionExecute)
	}
	if _, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "trip:b", Reason: "cancelled"}); err != nil {
		t.Fatal(err)
	}
	all, err := h.eng.Groups(ctx, "")
	if err != nil {
		t.Fatalf("err != nil: all groups: %+v %v", all, err)
	}
	if len(all) != 2 {
		t.Fatalf("len(all) != 2: all groups: %+v %v", all, err)
	}
	unwinding, err := h.eng.Groups(ctx, "default", ledger.GroupUnwinding, ledger.GroupUnwound)
	if err != nil {
		t.Fatalf("err != nil: unwinding groups: %+v %v", unwinding, err)
	}
	if len(unwinding) != 1 {
		t.Fatalf("len(unwinding) != 1: unwinding groups: %+v %v", unwinding, err)
	}
	if g := unwinding[0]; g.GroupKey != "trip:b" || g.Namespace != "default" || g.Reason != "cancelled" || !g.Since.Equal(h.clock.Now()) {
		t.Fatalf("group: %+v", g)
	}
	if other, _ := h.eng.Groups(ctx, "elsewhere"); len(other) != 0 {
		t.Fatalf("another namespace's groups: %+v", other)
	}
}

// unwindCounts is what an unwind's answer is checked for: its state and
// how many compensations, permanent and unresolved steps it lists.
type unwindCounts struct {
	State                                string
	Compensations, Permanent, Unresolved int
}

func countsOf(res *ledger.UnwindResult) unwindCounts {
	return unwindCounts{res.State, len(res.Compensations), len(res.Permanent), len(res.Unresolved)}
}
