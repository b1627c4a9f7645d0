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
	if r.RetryAfterSeconds < 1 {
		t.Fatalf("r.RetryAfterSeconds < 1: after the clock stepped back: %+v", r)
	}
	if r.EffectID != a.EffectID {
		t.Fatalf("r.EffectID != a.EffectID: after the clock stepped back: %+v", r)
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

func TestSweepKeepsWhatTheClockStepBackMadeEarly(t *testing.T) {
	// The reaper scans for leases due by the clock, then the writer checks
	// them by the clock again. If the clock steps back in between, the
	// writer declines, and the lease must stay in the index for the next
	// sweep rather than be dropped (the effect would stay pending forever
	// and never count against its agent). The same holds for retention.
	h := newHarness(t, testRules())
	ctx := context.Background()
	a := h.beginWant(ledger.BeginRequest{IdempotencyKey: "sb:1", EffectType: "sms.send", AgentID: "bot", LeaseSeconds: 60}, ledger.DecisionExecute)
	done := h.beginWant(ledger.BeginRequest{IdempotencyKey: "sb:2", EffectType: "sms.send", AgentID: "bot"}, ledger.DecisionExecute)
	h.report(done.EffectID, ledger.OutcomeSucceeded)
	h.clock.Advance(2 * time.Minute)
	h.clock.stepBackAfterNextReading(90 * time.Second) // the scan sees the lease due, the writer does not
	if n, err := h.eng.Reap(ctx); err != nil || n != 0 {
		t.Fatalf("reap across the step back = %d, %v", n, err)
	}
	h.clock.Advance(time.Minute)
	if n, err := h.eng.Reap(ctx); err != nil || n != 1 {
		t.Fatalf("reap once the lease is due again = %d, %v; want the lease expired", n, err)
	}
	if eff := h.get(a.EffectID); eff.State != ledger.StateIndeterminate {
		t.Fatalf("effect %s after the reap", eff.State)
	}
	counts, _ := h.eng.StateCounts(ctx)
	if counts[ledger.StatePending] != 0 {
		t.Fatalf("counts[ledger.StatePending] != 0: persisted counts %v: the expiry was not written", counts)
	}
	if counts[ledger.StateIndeterminate] != 1 {
		t.Fatalf("counts[ledger.StateIndeterminate] != 1: persisted counts %v: the expiry was not written", counts)
	}
	h.clock.Advance(720 * time.Hour)
	h.clock.stepBackAfterNextReading(time.Hour)
	if n, err := h.eng.Purge(ctx); err != nil || n != 0 {
		t.Fatalf("purge across the step back = %d, %v", n, err)
	}
	h.clock.Advance(2 * time.Hour)
	if n, err := h.eng.Purge(ctx); err != nil || n != 1 {
		t.Fatalf("purge once due again = %d, %v; want the finished effect purged", n, err)
	}
	assertStateCounts(t, h)
}
