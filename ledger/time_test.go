package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestClockStepsBackwards: when the clock jumps back (NTP, a VM restore),
// nothing already granted is forgotten or granted twice: an in-flight lease
// stays in flight, spend stays counted, and approvals do not expire early.
func TestClockStepsBackwards(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	a := h.beginWant(pay("back:1", "acct_1", 90_000_000), ledger.DecisionExecute)
	big := h.beginWant(pay("back:big", "acct_2", 150_000_000), ledger.DecisionApprovalRequired)

	h.clock.Advance(-2 * time.Hour)
	r := h.beginWant(pay("back:1", "acct_1", 90_000_000), ledger.DecisionInFlight)
	if r.RetryAfterSeconds < 1 || r.EffectID != a.EffectID {
		t.Fatalf("after the clock stepped back: %+v", r)
	}
	if n, _ := h.eng.Reap(ctx); n != 0 {
		t.Fatal("a lease expired because the clock went back")
	}
	// Spend granted "in the future" still counts against the ceiling.
	h.beginWant(pay("back:2", "acct_1", 90_000_000), ledger.DecisionExecute)
	if d := h.beginWant(pay("back:3", "acct_1", 90_000_000), ledger.DecisionDenied); d.Reason != ledger.ReasonBudgetExceeded {
		t.Fatalf("ceiling after the clock stepped back: %+v", d)
	}
	if again := h.beginWant(pay("back:big", "acct_2", 150_000_000), ledger.DecisionApprovalRequired); again.ApprovalID != big.ApprovalID {
		t.Fatal("approval replaced after the clock stepped back")
	}
	// Forward again past the lease: it expires exactly once.
	h.clock.Advance(2*time.Hour + 61*time.Second)
	if n, _ := h.eng.Reap(ctx); n != 2 {
		t.Fatalf("reaped %d, want the two leases", n)
	}
	h.beginWant(pay("back:1", "acct_1", 90_000_000), ledger.DecisionBlocked)
}

// TestLeaseBoundaries pins the exact tick at which a lease ends for the
// reaper, a begin and a report.
func TestLeaseBoundaries(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	req := email("edge", "bot")
	req.LeaseSeconds = 10
	a := h.beginWant(req, ledger.DecisionExecute)
	h.clock.Advance(10*time.Second - time.Nanosecond)
	if n, _ := h.eng.Reap(ctx); n != 0 {
		t.Fatal("reaped a nanosecond early")
	}
	if eff := h.get(a.EffectID); eff.State != ledger.StatePending {
		t.Fatalf("a nanosecond before: %s", eff.State)
	}
	h.clock.Advance(time.Nanosecond)
	if eff := h.get(a.EffectID); eff.State != ledger.StateIndeterminate {
		t.Fatalf("at expiry Get shows %s", eff.State)
	}
	if n, _ := h.eng.Reap(ctx); n != 1 {
		t.Fatal("not reaped at expiry")
	}
	// The report arriving a tick late still settles it.
	h.clock.Advance(time.Nanosecond)
	if eff := h.report(a.EffectID, ledger.OutcomeSucceeded); eff.State != ledger.StateSucceeded {
		t.Fatalf("late report: %s", eff.State)
	}
}
