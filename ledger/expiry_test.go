package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// eventsOf returns the queued outbox events of a type.
func eventsOf(t *testing.T, h *harness, typ string) []ledger.Event {
	t.Helper()
	all, err := h.eng.Outbox(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	var out []ledger.Event
	for _, en := range all {
		if en.Event.Type == typ {
			out = append(out, en.Event)
		}
	}
	return out
}

func TestTheApprovalRequiredAnswerSaysWhenToAskAgainAndWhenItLapses(t *testing.T) {
	h := newHarness(t, testRules())
	now := h.clock.Now()
	res := h.beginWant(pay("big", "acct_1", 150_000_000), ledger.DecisionApprovalRequired)
	if res.RetryAfterSeconds != 30 {
		t.Fatalf("res.RetryAfterSeconds != 30: retry_after_seconds %d, expires_at %v", res.RetryAfterSeconds, res.ExpiresAt)
	}
	if res.ExpiresAt == nil {
		t.Fatalf("res.ExpiresAt == nil: retry_after_seconds %d, expires_at %v", res.RetryAfterSeconds, res.ExpiresAt)
	}
	if !res.ExpiresAt.Equal(now.Add(24 * time.Hour)) {
		t.Fatalf("!res.ExpiresAt.Equal(now.Add(24*time.Hour)): retry_after_seconds %d, expires_at %v", res.RetryAfterSeconds, res.ExpiresAt)
	}
	again := h.beginWant(pay("big", "acct_1", 150_000_000), ledger.DecisionApprovalRequired)
	if again.RetryAfterSeconds != 30 {
		t.Fatalf("again.RetryAfterSeconds != 30: asked again: %+v", again)
	}
	if !again.ExpiresAt.Equal(*res.ExpiresAt) {
		t.Fatalf("!again.ExpiresAt.Equal(*res.ExpiresAt): asked again: %+v", again)
	}
	if again.ApprovalID != res.ApprovalID {
		t.Fatalf("again.ApprovalID != res.ApprovalID: asked again: %+v", again)
	}
	// Never past the expiry.
	h.clock.Advance(24*time.Hour - 10*time.Second)
	if late := h.beginWant(pay("big", "acct_1", 150_000_000), ledger.DecisionApprovalRequired); late.RetryAfterSeconds != 10 {
		t.Fatalf("10 s before the expiry: retry_after_seconds %d", late.RetryAfterSeconds)
	}
}

func TestALapsedApprovalRequestIsToldOnce(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	first := h.beginWant(pay("swept", "acct_1", 150_000_000), ledger.DecisionApprovalRequired)
	decided := h.beginWant(pay("decided", "acct_2", 150_000_000), ledger.DecisionApprovalRequired)
	if _, err := h.eng.Approve(ctx, decided.ApprovalID, "alice", ""); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(25 * time.Hour)
	for range 2 {
		if _, err := h.eng.Reap(ctx); err != nil {
			t.Fatal(err)
		}
	}
	exp := eventsOf(t, h, ledger.EventApprovalExpired)
	if len(exp) != 1 {
		t.Fatalf("len(exp) != 1: expired events: %+v (want one, for %s; none for a decided one)", exp, first.ApprovalID)
	}
	if exp[0].ApprovalID != first.ApprovalID {
		t.Fatalf("exp[0].ApprovalID != first.ApprovalID: expired events: %+v (want one, for %s; none for a decided one)", exp, first.ApprovalID)
	}
	if exp[0].EffectType != "payment.charge" {
		t.Fatalf("exp[0].EffectType != \"payment.charge\": expired events: %+v (want one, for %s; none for a decided one)", exp, first.ApprovalID)
	}
	if exp[0].ID == "" {
		t.Fatalf("exp[0].ID == \"\": expired events: %+v (want one, for %s; none for a decided one)", exp, first.ApprovalID)
	}
	if list, _ := h.eng.ListApprovals(ctx, "", ledger.ApprovalExpired); len(list) != 1 || list[0].ApprovalID != first.ApprovalID {
		t.Fatalf("expired approvals: %+v", list)
	}
	// The agent's next begin asks again, with a new request; the old one
	// is not told of twice.
	next := h.beginWant(pay("swept", "acct_1", 150_000_000), ledger.DecisionApprovalRequired)
	if next.ApprovalID == first.ApprovalID {
		t.Fatal("the lapsed request was answered again")
	}
	if n := len(eventsOf(t, h, ledger.EventApprovalExpired)); n != 1 {
		t.Fatalf("%d expired events after asking again", n)
	}

	// Without the sweep: the begin that asks again tells of the lapsed
	// request, and a later sweep does not tell again.
	lazy := h.beginWant(pay("lazy", "acct_3", 150_000_000), ledger.DecisionApprovalRequired)
	h.clock.Advance(25 * time.Hour)
	h.beginWant(pay("lazy", "acct_3", 150_000_000), ledger.DecisionApprovalRequired)
	count := func(id string) int {
		n := 0
		for _, ev := range eventsOf(t, h, ledger.EventApprovalExpired) {
			if ev.ApprovalID == id {
				n++
			}
		}
		return n
	}
	if count(lazy.ApprovalID) != 1 {
		t.Fatalf("the begin after the expiry told of it %d times", count(lazy.ApprovalID))
	}
	if _, err := h.eng.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	if count(lazy.ApprovalID) != 1 {
		t.Fatalf("count(lazy.ApprovalID) != 1: after the sweep: lazy %d, next %d", count(lazy.ApprovalID), count(next.ApprovalID))
	}
	if count(next.ApprovalID) != 1 {
		t.Fatalf("count(next.ApprovalID) != 1: after the sweep: lazy %d, next %d", count(lazy.ApprovalID), count(next.ApprovalID))
	}
}
