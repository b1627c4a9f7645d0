package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestAFleetStaysUnderItsCeilingAfterSpendPassedIt: spend that was made
// takes the ceiling past its limit (an effect settled above its estimate,
// an operator overturning a late failed report): it is counted, whatever
// it costs. While it is still in the window, another replica's own older
// spend leaves the window: the grant that spend held must not be spent
// again while the ceiling still counts more than its limit less that
// begin, as one engine decides. Both backends.
func TestAFleetStaysUnderItsCeilingAfterSpendPassedIt(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		pass func(t *testing.T, h *harness, e []*ledger.Engine) // takes the ceiling to 110 on e[0]
	}{
		{"a report above the estimate", func(t *testing.T, h *harness, e []*ledger.Engine) {
			a := fleetBeginWant(t, e[0], spend("a", "bot", "x", 10), ledger.DecisionExecute)
			fleetReport(t, e[0], a, ledger.OutcomeSucceeded, i64(60))
		}},
		{"an operator overturning a late failed report", func(t *testing.T, h *harness, e []*ledger.Engine) {
			req := spend("a", "bot", "x", 40)
			req.LeaseSeconds = 10
			a := fleetBeginWant(t, e[0], req, ledger.DecisionExecute)
			h.clock.Advance(time.Minute)
			fleetReport(t, e[0], a, ledger.OutcomeFailed, nil) // late, and false
			s := fleetBeginWant(t, e[0], spend("a2", "bot", "x", 20), ledger.DecisionExecute)
			fleetReport(t, e[0], s, ledger.OutcomeSucceeded, nil)
			if _, err := e[0].Resolve(ctx, ledger.ResolveRequest{EffectID: a.EffectID, Resolution: ledger.OutcomeSucceeded, ResolvedBy: "admin:alice"}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, e := fleet(t, globalCeiling(100, "1h"), 2)
			b := fleetBeginWant(t, e[1], spend("b", "bot", "x", 50), ledger.DecisionExecute)
			fleetReport(t, e[1], b, ledger.OutcomeSucceeded, nil)
			h.clock.Advance(30 * time.Minute)
			tc.pass(t, h, e)
			wantCounted(t, h, "fleet", 110)   // past the limit: it was spent
			h.clock.Advance(32 * time.Minute) // b's 50 has left the window, the other 60 has not
			res := fleetBeginWant(t, e[1], spend("c", "bot", "x", 45), ledger.DecisionDenied)
			if res.Ceiling == nil {
				t.Errorf("res.Ceiling == nil: c refused with %+v, want 60 counted", res.Ceiling)
			} else if res.Ceiling.Counted != 60 {
				t.Errorf("res.Ceiling.Counted != 60: c refused with %+v, want 60 counted", res.Ceiling)
			}
			fleetBeginWant(t, e[1], spend("d", "bot", "x", 40), ledger.DecisionExecute)
			fleetBeginWant(t, e[0], spend("e", "bot", "x", 1), ledger.DecisionDenied)
			wantCounted(t, h, "fleet", 100)
		})
	}
}

// TestAReplicaThatSawNoClockJumpSpendsNoGrantPastTheCeiling: two
// replicas on PostgreSQL, each reading a clock of its own. Replica 1
// holds an unused part of its grant. Replica 0's clock jumps two hours
// ahead: on that reading the hour has passed, and it spends its grant
// again (a wrong reading may let spend go on it). Replica 1, whose clock
// never moved, must then decide on everything counted, as one engine
// would: refused, both while replica 0 is ahead and after its correction,
// before replica 0 begins anything again.
func TestAReplicaThatSawNoClockJumpSpendsNoGrantPastTheCeiling(t *testing.T) {
	if testBackend != "postgres" {
		t.Skip("only a shared store (PostgreSQL) has several engines")
	}
	h := newHarness(t, globalCeiling(1000, "1h"))
	jumpy, steady := newClock(), newClock()
	a, b := fleetEngine(t, h, jumpy), fleetEngine(t, h, steady)
	r := fleetBeginWant(t, b, spend("b1", "bot", "x", 100), ledger.DecisionExecute) // b's share takes more than 100
	fleetReport(t, b, r, ledger.OutcomeSucceeded, nil)
	r = fleetBeginWant(t, a, spend("a1", "bot", "x", 800), ledger.DecisionExecute)
	fleetReport(t, a, r, ledger.OutcomeSucceeded, nil)
	fleetBeginWant(t, b, spend("b2", "bot", "x", 1), ledger.DecisionExecute) // within b's grant
	jumpy.Advance(2 * time.Hour)
	fleetBeginWant(t, a, spend("a2", "bot", "x", 800), ledger.DecisionExecute) // on the wrong reading
	res := fleetBeginWant(t, b, spend("b3", "bot", "x", 1), ledger.DecisionDenied)
	if res.Ceiling == nil {
		t.Errorf("res.Ceiling == nil: b3 refused with %+v, want 1701 counted", res.Ceiling)
	} else if res.Ceiling.Counted != 1701 {
		t.Errorf("res.Ceiling.Counted != 1701: b3 refused with %+v, want 1701 counted", res.Ceiling)
	}
	jumpy.Advance(-2 * time.Hour) // corrected
	res = fleetBeginWant(t, b, spend("b4", "bot", "x", 1), ledger.DecisionDenied)
	if res.Ceiling == nil {
		t.Errorf("res.Ceiling == nil: b4 refused with %+v, want 1701 counted", res.Ceiling)
	} else if res.Ceiling.Counted != 1701 {
		t.Errorf("res.Ceiling.Counted != 1701: b4 refused with %+v, want 1701 counted", res.Ceiling)
	}
	fleetBeginWant(t, a, spend("a3", "bot", "x", 1), ledger.DecisionDenied)
	wantCounted(t, h, "fleet", 1701)
}
