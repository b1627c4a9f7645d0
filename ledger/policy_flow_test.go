package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

func TestApprovalFlow(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	big := pay("inv:big", "acct_1", 150_000_000)

	r := h.beginWant(big, ledger.DecisionApprovalRequired)
	if r.ApprovalID == "" {
		t.Fatalf("r.ApprovalID == \"\": approval_required: %+v", r)
	}
	if *r.ThresholdMicros != 100_000_000 {
		t.Fatalf("*r.ThresholdMicros != 100_000_000: approval_required: %+v", r)
	}
	if *r.EstimatedCostMicros != 150_000_000 {
		t.Fatalf("*r.EstimatedCostMicros != 150_000_000: approval_required: %+v", r)
	}
	if r.State != ledger.StateAwaitingApproval {
		t.Fatalf("r.State != ledger.StateAwaitingApproval: approval_required: %+v", r)
	}
	if again := h.beginWant(big, ledger.DecisionApprovalRequired); again.ApprovalID != r.ApprovalID {
		t.Fatalf("second begin asked again: %s vs %s", again.ApprovalID, r.ApprovalID)
	}
	pending, err := h.eng.ListApprovals(ctx, "", ledger.ApprovalPending)
	if err != nil {
		t.Fatalf("err != nil: pending approvals: %+v, %v", pending, err)
	}
	if len(pending) != 1 {
		t.Fatalf("len(pending) != 1: pending approvals: %+v, %v", pending, err)
	}
	if pending[0].ApprovalID != r.ApprovalID {
		t.Fatalf("pending[0].ApprovalID != r.ApprovalID: pending approvals: %+v, %v", pending, err)
	}
	if pending[0].AgentID != "bot" {
		t.Fatalf("pending[0].AgentID != \"bot\": pending approvals: %+v, %v", pending, err)
	}
	// Nothing is reserved while a human decides.
	if got := budgetsByName(t, h)["daily-spend"]; got != 0 {
		t.Fatalf("counted %d before approval", got)
	}
	a, err := h.eng.Approve(ctx, r.ApprovalID, "alice", "ok for Q4")
	if err != nil {
		t.Fatalf("err != nil: approve: %+v, %v", a, err)
	}
	if a.State != ledger.ApprovalApproved {
		t.Fatalf("a.State != ledger.ApprovalApproved: approve: %+v, %v", a, err)
	}
	if a.DecidedBy != "alice" {
		t.Fatalf("a.DecidedBy != \"alice\": approve: %+v, %v", a, err)
	}
	if a.Note != "ok for Q4" {
		t.Fatalf("a.Note != \"ok for Q4\": approve: %+v, %v", a, err)
	}
	if _, err := h.eng.Reject(ctx, r.ApprovalID, "bob", ""); err == nil {
		t.Fatal("rejecting an approved approval must fail")
	}
	h.reopen()
	ex := h.beginWant(big, ledger.DecisionExecute)
	if ex.EffectID != r.EffectID {
		t.Fatalf("ex.EffectID != r.EffectID: execute after approval: %+v", ex)
	}
	if ex.Attempt != 1 {
		t.Fatalf("ex.Attempt != 1: execute after approval: %+v", ex)
	}
	if got := budgetsByName(t, h)["daily-spend"]; got != 150_000_000 {
		t.Fatalf("counted %d after execute", got)
	}
	// An approval is for one execute: after a definite failure the retry
	// asks again, under a new approval id.
	h.report(ex.EffectID, ledger.OutcomeFailed)
	again := h.beginWant(big, ledger.DecisionApprovalRequired)
	if again.ApprovalID == r.ApprovalID {
		t.Fatalf("the retry reused the used approval: %+v", again)
	}
	assertStateCounts(t, h)
}

func TestApprovalLargerCostAsksAgain(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	r := h.beginWant(pay("inv:c", "acct_1", 120_000_000), ledger.DecisionApprovalRequired)
	if _, err := h.eng.Approve(ctx, r.ApprovalID, "alice", ""); err != nil {
		t.Fatal(err)
	}
	more := pay("inv:c", "acct_1", 120_000_000)
	more.EstimatedCostMicros = i64(190_000_000)
	r2 := h.beginWant(more, ledger.DecisionApprovalRequired)
	if r2.ApprovalID == r.ApprovalID {
		t.Fatal("a larger estimate than approved must ask again")
	}
}

func TestApprovalRejectedIsSticky(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	big := pay("inv:rej", "acct_1", 150_000_000)
	r := h.beginWant(big, ledger.DecisionApprovalRequired)
	if _, err := h.eng.Reject(ctx, r.ApprovalID, "bob", "too much"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		h.clock.Advance(48 * time.Hour) // rejection does not expire
		d := h.beginWant(big, ledger.DecisionDenied)
		if d.Reason != ledger.ReasonApprovalRejected {
			t.Fatalf("d.Reason != ledger.ReasonApprovalRejected: after reject: %+v", d)
		}
		if d.ApprovalID != r.ApprovalID {
			t.Fatalf("d.ApprovalID != r.ApprovalID: after reject: %+v", d)
		}
	}
	_, err := h.eng.Approve(ctx, "apr_unknown", "bob", "")
	wantCode(t, err, ledger.CodeApprovalNotFound)
}

func TestApprovalExpiry(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	big := pay("inv:exp", "acct_1", 150_000_000)
	r := h.beginWant(big, ledger.DecisionApprovalRequired)

	h.clock.Advance(24*time.Hour - time.Second)
	if same := h.beginWant(big, ledger.DecisionApprovalRequired); same.ApprovalID != r.ApprovalID {
		t.Fatal("approval expired early")
	}
	h.clock.Advance(time.Second)
	if l, _ := h.eng.ListApprovals(ctx, "", ledger.ApprovalExpired); len(l) != 1 {
		t.Fatalf("expired approvals: %+v", l)
	}
	_, err := h.eng.Approve(ctx, r.ApprovalID, "alice", "")
	wantCode(t, err, ledger.CodeInvalidStateTransition)
	fresh := h.beginWant(big, ledger.DecisionApprovalRequired)
	if fresh.ApprovalID == r.ApprovalID {
		t.Fatal("an expired request must be replaced by a new one")
	}
	_, err = h.eng.Approve(ctx, r.ApprovalID, "alice", "")
	wantCode(t, err, ledger.CodeInvalidStateTransition) // superseded

	// A granted approval expires too if the agent never comes back.
	if _, err := h.eng.Approve(ctx, fresh.ApprovalID, "alice", ""); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(24 * time.Hour)
	if again := h.beginWant(big, ledger.DecisionApprovalRequired); again.ApprovalID == fresh.ApprovalID {
		t.Fatal("an expired grant must ask again")
	}
}

func TestCeilingsDenyBeforeApproval(t *testing.T) {
	h := newHarness(t, testRules())
	// 90 + 90 to acct_1 fit the 200 per-counterparty ceiling; a third does not.
	h.beginWant(pay("a1", "acct_1", 90_000_000), ledger.DecisionExecute)
	h.beginWant(pay("a2", "acct_1", 90_000_000), ledger.DecisionExecute)
	d := h.beginWant(pay("a3", "acct_1", 90_000_000), ledger.DecisionDenied)
	if d.Reason != ledger.ReasonBudgetExceeded {
		t.Fatalf("d.Reason != ledger.ReasonBudgetExceeded: per-counterparty: %+v %+v", d, d.Ceiling)
	}
	if d.Ceiling == nil {
		t.Fatalf("d.Ceiling == nil: per-counterparty: %+v %+v", d, d.Ceiling)
	}
	if d.Ceiling.Name != "per-counterparty" {
		t.Fatalf("d.Ceiling.Name != \"per-counterparty\": per-counterparty: %+v %+v", d, d.Ceiling)
	}
	if d.Ceiling.Counted != 180_000_000 {
		t.Fatalf("d.Ceiling.Counted != 180_000_000: per-counterparty: %+v %+v", d, d.Ceiling)
	}
	// Other counterparties fill the global 500 ceiling.
	h.beginWant(pay("b1", "acct_2", 90_000_000), ledger.DecisionExecute)
	h.beginWant(pay("b2", "acct_2", 90_000_000), ledger.DecisionExecute)
	h.beginWant(pay("c1", "acct_3", 90_000_000), ledger.DecisionExecute) // 450
	d = h.beginWant(pay("c2", "acct_3", 90_000_000), ledger.DecisionDenied)
	if d.Ceiling.Name != "daily-spend" {
		t.Fatalf("d.Ceiling.Name != \"daily-spend\": global: %+v", d.Ceiling)
	}
	if d.Ceiling.Remaining != 50_000_000 {
		t.Fatalf("d.Ceiling.Remaining != 50_000_000: global: %+v", d.Ceiling)
	}
	// A large action that would break a ceiling is denied, not sent to a human.
	d = h.beginWant(pay("big", "acct_4", 150_000_000), ledger.DecisionDenied)
	if d.Reason != ledger.ReasonBudgetExceeded {
		t.Fatalf("big: %+v", d)
	}
	// Windows slide: after 24h (plus one bucket) the spend has left.
	h.clock.Advance(24*time.Hour + 24*time.Minute)
	h.beginWant(pay("c2", "acct_3", 90_000_000), ledger.DecisionExecute)
}

func TestActualCostSettlesCounters(t *testing.T) {
	h := newHarness(t, testRules())
	a := h.beginWant(pay("s1", "acct_1", 90_000_000), ledger.DecisionExecute)
	h.report(a.EffectID, ledger.OutcomeSucceeded, func(r *ledger.ReportRequest) { r.ActualCostMicros = i64(30_000_000) })
	b := budgetsByName(t, h)
	if b["daily-spend"] != 30_000_000 {
		t.Fatalf("b[\"daily-spend\"] != 30_000_000: settled: %v", b)
	}
	if b["per-counterparty"] != 30_000_000 {
		t.Fatalf("b[\"per-counterparty\"] != 30_000_000: settled: %v", b)
	}
	r := h.beginWant(pay("s2", "acct_1", 90_000_000), ledger.DecisionExecute)
	if len(r.Budgets) != 2 {
		t.Fatalf("budgets in execute: %+v", r.Budgets)
	}
	for _, u := range r.Budgets {
		if u.Counted != 120_000_000 {
			t.Fatalf("%s counted %d, want 120000000", u.Name, u.Counted)
		}
	}
}

func TestCountCeilingPerAgent(t *testing.T) {
	h := newHarness(t, testRules())
	for i := range 3 {
		h.beginWant(email("m"+itoa(int64(i)), "a1"), ledger.DecisionExecute)
	}
	d := h.beginWant(email("m4", "a1"), ledger.DecisionDenied)
	if d.Ceiling == nil {
		t.Fatalf("d.Ceiling == nil: count ceiling: %+v", d)
	}
	if d.Ceiling.Name != "email-rate" {
		t.Fatalf("d.Ceiling.Name != \"email-rate\": count ceiling: %+v", d)
	}
	if d.Ceiling.Unit != "count" {
		t.Fatalf("d.Ceiling.Unit != \"count\": count ceiling: %+v", d)
	}
	h.beginWant(email("m4", "a2"), ledger.DecisionExecute)
	h.clock.Advance(time.Hour + time.Minute)
	h.beginWant(email("m5", "a1"), ledger.DecisionExecute)
}

func TestRunWindowCeiling(t *testing.T) {
	h := newHarness(t, testRules())
	llm := func(key, run string, cost int64) ledger.BeginRequest {
		return ledger.BeginRequest{IdempotencyKey: key, EffectType: "llm.call", RunID: run, EstimatedCostMicros: i64(cost)}
	}
	h.beginWant(llm("l1", "run1", 60), ledger.DecisionExecute)
	h.clock.Advance(30 * 24 * time.Hour) // a run window never slides
	h.beginWant(llm("l2", "run1", 41), ledger.DecisionDenied)
	h.beginWant(llm("l3", "run2", 100), ledger.DecisionExecute)
}

func TestMaxUnreported(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	sms := func(key string) ledger.BeginRequest {
		return ledger.BeginRequest{IdempotencyKey: key, EffectType: "sms.send", AgentID: "texter"}
	}
	a := h.beginWant(sms("s1"), ledger.DecisionExecute)
	h.beginWant(sms("s2"), ledger.DecisionExecute)
	h.clock.Advance(2 * time.Minute)
	if n, err := h.eng.Reap(ctx); n != 2 || err != nil {
		t.Fatalf("reap %d %v", n, err)
	}
	d := h.beginWant(sms("s3"), ledger.DecisionDenied)
	if d.Reason != ledger.ReasonUnreported {
		t.Fatalf("d.Reason != ledger.ReasonUnreported: unreported: %+v %+v", d, d.IntegrationWarning)
	}
	if d.IntegrationWarning == nil {
		t.Fatalf("d.IntegrationWarning == nil: unreported: %+v %+v", d, d.IntegrationWarning)
	}
	if d.IntegrationWarning.UnreportedCount != 2 {
		t.Fatalf("d.IntegrationWarning.UnreportedCount != 2: unreported: %+v %+v", d, d.IntegrationWarning)
	}
	if d.IntegrationWarning.OldestEffectID != a.EffectID {
		t.Fatalf("d.IntegrationWarning.OldestEffectID != a.EffectID: unreported: %+v %+v", d, d.IntegrationWarning)
	}
	// Other agents are not affected.
	other := sms("o1")
	other.AgentID = "other"
	h.beginWant(other, ledger.DecisionExecute)
	if _, err := h.eng.Resolve(ctx, ledger.ResolveRequest{EffectID: a.EffectID, Resolution: ledger.OutcomeFailed, ResolvedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	h.beginWant(sms("s3"), ledger.DecisionExecute)

	long := sms("s4")
	long.LeaseSeconds = 121
	_, err := h.eng.Begin(ctx, long)
	wantCode(t, err, ledger.CodeInvalidArgument)
}

func TestNamespacesIsolate(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	a := email("same", "bot")
	a.Namespace = "shop"
	b := a
	b.Namespace = "blog"
	ra := h.beginWant(a, ledger.DecisionExecute)
	rb := h.beginWant(b, ledger.DecisionExecute)
	if ra.EffectID == rb.EffectID {
		t.Fatal("namespaces share an effect")
	}
	if _, err := h.eng.Get(ctx, "blog", ra.EffectID, ""); err == nil {
		t.Fatal("blog can read shop's effect")
	}
	_, err := h.eng.Report(ctx, ledger.ReportRequest{Namespace: "blog", EffectID: ra.EffectID, Outcome: ledger.OutcomeSucceeded})
	wantCode(t, err, ledger.CodeEffectNotFound)
	_, err = h.eng.Resolve(ctx, ledger.ResolveRequest{Namespace: "blog", EffectID: ra.EffectID, Resolution: ledger.OutcomeFailed})
	wantCode(t, err, ledger.CodeEffectNotFound)
	// Budgets are per namespace too: three emails in each.
	for i := range 2 {
		for _, ns := range []string{"shop", "blog"} {
			r := email("n"+itoa(int64(i)), "bot")
			r.Namespace = ns
			h.beginWant(r, ledger.DecisionExecute)
		}
	}
	page, err := h.eng.List(ctx, ledger.Filter{Namespace: "shop"})
	if err != nil {
		t.Fatalf("err != nil: shop list: %d %v", len(page.Effects), err)
	}
	if len(page.Effects) != 3 {
		t.Fatalf("len(page.Effects) != 3: shop list: %d %v", len(page.Effects), err)
	}
	// Groups are per namespace: blog can neither unwind nor see shop's.
	g := email("g1", "grouper")
	g.Namespace, g.GroupKey = "shop", "trip"
	h.beginWant(g, ledger.DecisionExecute)
	_, err = h.eng.Unwind(ctx, ledger.UnwindRequest{Namespace: "blog", GroupKey: "trip"})
	wantCode(t, err, ledger.CodeGroupNotFound)
	g.Namespace, g.IdempotencyKey = "shop", "g2"
	h.beginWant(g, ledger.DecisionExecute) // still active for shop
	if p, _ := h.eng.List(ctx, ledger.Filter{Namespace: "blog", GroupKey: "trip"}); len(p.Effects) != 0 {
		t.Fatalf("blog lists shop's group: %+v", p.Effects)
	}
}
