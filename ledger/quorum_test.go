package ledger_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/pgstore"
)

// quorumRules: payments from $100 go to a human; from $1,000 two people
// must approve.
func quorumRules() []ledger.Rule {
	return []ledger.Rule{{Match: "payment.*", ApprovalThresholdMicros: i64(100_000_000),
		ApproversRequired: 2, ApproversThresholdMicros: i64(1_000_000_000)}}
}

func approve(t *testing.T, e *ledger.Engine, id, by string) *ledger.Approval {
	t.Helper()
	a, err := e.Approve(context.Background(), id, by, "ok by "+by)
	if err != nil {
		t.Fatalf("approve %s as %s: %v", id, by, err)
	}
	return a
}

func approvedBy(a *ledger.Approval) []string {
	var out []string
	for _, p := range a.ApprovedBy {
		out = append(out, p.By)
	}
	return out
}

// approvalEvents are the approval.* events of id in the audit log, as
// type, actor and approvers.
func approvalEvents(t *testing.T, h *harness, id string) []string {
	t.Helper()
	recs, _ := auditOf(t, h)
	var out []string
	for _, r := range recs {
		if ev := r.Event; ev.ApprovalID == id && strings.HasPrefix(ev.Type, "approval.") {
			out = append(out, ev.Type+" "+ev.Actor+" ["+strings.Join(ev.ApprovedBy, ",")+"]")
		}
	}
	return out
}

func TestAnApprovalNeedingTwoPeopleIsUsableOnlyOnceTwoDistinctPeopleApproved(t *testing.T) {
	h := newHarness(t, quorumRules())
	req := pay("q:1", "acct_1", 1_500_000_000)
	asked := h.beginWant(req, ledger.DecisionApprovalRequired)
	if !strings.Contains(asked.Message, "2 people (0 so far)") {
		t.Errorf("message %q does not say two people must approve", asked.Message)
	}
	a := approve(t, h.eng, asked.ApprovalID, "admin:alice")
	if a.State != ledger.ApprovalPending || a.ApproversRequired != 2 {
		t.Errorf("after alice: state %s, approvers_required %d; want pending, 2", a.State, a.ApproversRequired)
	}
	if res := h.beginWant(req, ledger.DecisionApprovalRequired); !strings.Contains(res.Message, "2 people (1 so far)") {
		t.Errorf("message %q does not say one of two approved", res.Message)
	}
	// The same person again, through another way in, counts once.
	a = approve(t, h.eng, asked.ApprovalID, "admin:alice")
	if diff := cmp.Diff([]string{"admin:alice"}, approvedBy(a)); diff != "" {
		t.Errorf("approved_by after alice twice (-want +got):\n%s", diff)
	}
	h.beginWant(req, ledger.DecisionApprovalRequired)
	a = approve(t, h.eng, asked.ApprovalID, "slack:U0BOB")
	if a.State != ledger.ApprovalApproved || a.DecidedBy != "slack:U0BOB" {
		t.Errorf("after bob: state %s decided_by %q; want approved by slack:U0BOB", a.State, a.DecidedBy)
	}
	if diff := cmp.Diff([]string{"admin:alice", "slack:U0BOB"}, approvedBy(a)); diff != "" {
		t.Errorf("approved_by (-want +got):\n%s", diff)
	}
	h.beginWant(req, ledger.DecisionExecute)
	want := []string{
		"approval.requested  []",
		"approval.partially_approved admin:alice [admin:alice]",
		"approval.decided slack:U0BOB [admin:alice,slack:U0BOB]",
	}
	if diff := cmp.Diff(want, approvalEvents(t, h, asked.ApprovalID)); diff != "" {
		t.Errorf("approval events (-want +got):\n%s", diff)
	}
	box, err := h.eng.Outbox(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	var queued []string
	for _, en := range box {
		if en.Event.ApprovalID == asked.ApprovalID {
			queued = append(queued, en.Event.Type)
		}
	}
	if diff := cmp.Diff([]string{ledger.EventApprovalRequested, ledger.EventApprovalPartiallyApproved, ledger.EventApprovalDecided}, queued); diff != "" {
		t.Errorf("notified (-want +got):\n%s", diff)
	}
}

func TestOneRejectionEndsAnApprovalNeedingSeveral(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, quorumRules())
	req := pay("q:rej", "acct_1", 1_500_000_000)
	asked := h.beginWant(req, ledger.DecisionApprovalRequired)
	approve(t, h.eng, asked.ApprovalID, "admin:alice")
	if _, err := h.eng.Reject(ctx, asked.ApprovalID, "admin:bob", "no"); err != nil {
		t.Fatal(err)
	}
	_, err := h.eng.Approve(ctx, asked.ApprovalID, "admin:carol", "")
	wantCode(t, err, ledger.CodeInvalidStateTransition)
	if res := h.beginWant(req, ledger.DecisionDenied); res.Reason != ledger.ReasonApprovalRejected {
		t.Errorf("reason %q, want %q", res.Reason, ledger.ReasonApprovalRejected)
	}
}

func TestApproversRequiredAppliesFromItsOwnThreshold(t *testing.T) {
	h := newHarness(t, quorumRules())
	small := h.beginWant(pay("q:small", "acct_1", 150_000_000), ledger.DecisionApprovalRequired)
	if a := approve(t, h.eng, small.ApprovalID, "admin:alice"); a.State != ledger.ApprovalApproved || a.ApproversRequired != 0 {
		t.Errorf("$150 after one approval: state %s approvers_required %d, want approved, 0", a.State, a.ApproversRequired)
	}
	big := h.beginWant(pay("q:big", "acct_1", 1_000_000_000), ledger.DecisionApprovalRequired)
	if a := approve(t, h.eng, big.ApprovalID, "admin:alice"); a.State != ledger.ApprovalPending || a.ApproversRequired != 2 {
		t.Errorf("$1,000 after one approval: state %s approvers_required %d, want pending, 2", a.State, a.ApproversRequired)
	}
}

// TestAGrantNeverStandsInForSeveralApprovers: a grant is one operator's
// decision; it covers what one approver may decide, never what needs two.
func TestAGrantNeverStandsInForSeveralApprovers(t *testing.T) {
	h := newHarness(t, quorumRules())
	waiting := h.beginWant(pay("g:wait", "acct_1", 1_500_000_000), ledger.DecisionApprovalRequired)
	grant(t, h, ledger.GrantRequest{EffectType: "payment.*", AgentID: "bot", MaxEffects: i64(5)})
	h.beginWant(pay("g:wait", "acct_1", 1_500_000_000), ledger.DecisionApprovalRequired)
	h.beginWant(pay("g:new", "acct_1", 1_500_000_000), ledger.DecisionApprovalRequired)
	if res := h.beginWant(pay("g:one", "acct_1", 150_000_000), ledger.DecisionExecute); res.GrantID == "" {
		t.Errorf("the grant did not cover what one approver decides")
	}
	if eff := h.get(waiting.EffectID); eff.State != ledger.StateAwaitingApproval {
		t.Errorf("the waiting request is %s, want still awaiting approval", eff.State)
	}
}

// TestAnAgentNeverCountsTowardSeveralApprovers: an agent's name is refused
// as a decider, and a halt holds a partly approved request too.
func TestAnAgentNeverCountsTowardSeveralApprovers(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, quorumRules())
	asked := h.beginWant(pay("q:agent", "acct_1", 1_500_000_000), ledger.DecisionApprovalRequired)
	for _, by := range []string{"agent:bot", ""} {
		_, err := h.eng.Approve(ctx, asked.ApprovalID, by, "")
		wantCode(t, err, ledger.CodeUnauthorized)
	}
	approve(t, h.eng, asked.ApprovalID, "admin:alice")
	hl := halt(t, h, ledger.HaltRequest{HaltScope: ledger.HaltScope{AgentID: "bot"}})
	_, err := h.eng.Approve(ctx, asked.ApprovalID, "admin:bob", "")
	wantCode(t, err, ledger.CodeHalted)
	lift(t, h, hl.HaltID)
	if a := approve(t, h.eng, asked.ApprovalID, "admin:bob"); a.State != ledger.ApprovalApproved {
		t.Errorf("after the lift and bob: %s, want approved", a.State)
	}
}

func TestApproversRequiredIsValidated(t *testing.T) {
	for _, c := range []struct {
		name string
		rule ledger.Rule
		path string
	}{
		{"too many", ledger.Rule{Match: "a.*", ApprovalThresholdMicros: i64(1), ApproversRequired: 11}, "policies[0].approvers_required"},
		{"negative", ledger.Rule{Match: "a.*", ApprovalThresholdMicros: i64(1), ApproversRequired: -1}, "policies[0].approvers_required"},
		{"no threshold", ledger.Rule{Match: "a.*", ApproversRequired: 2}, "policies[0].approvers_required"},
		{"observed", ledger.Rule{Match: "a.*", ApprovalThresholdMicros: i64(1), ApproversRequired: 2, Mode: ledger.ModeObserve}, "policies[0].approvers_required"},
		{"from without approvers", ledger.Rule{Match: "a.*", ApprovalThresholdMicros: i64(1), ApproversThresholdMicros: i64(5)}, "policies[0].approvers_threshold_micros"},
		{"from below the threshold", ledger.Rule{Match: "a.*", ApprovalThresholdMicros: i64(10), ApproversRequired: 2, ApproversThresholdMicros: i64(5)}, "policies[0].approvers_threshold_micros"},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := ledger.ValidatePolicies([]ledger.Rule{c.rule})
			if len(errs) != 1 {
				t.Fatalf("%d errors, want 1: %v", len(errs), errs)
			}
			if errs[0].Path != c.path {
				t.Errorf("path %q, want %q (%s)", errs[0].Path, c.path, errs[0].Message)
			}
		})
	}
	if errs := ledger.ValidatePolicies(quorumRules()); len(errs) != 0 {
		t.Errorf("quorumRules refused: %v", errs)
	}
}

// TestTwoApproversAtOnceReachOneQuorum: alice and bob approve the same
// request at the same moment, each through its own engine on one
// PostgreSQL ledger (on Badger, through one engine from two goroutines,
// under -race), alice also twice at once: every request reaches its quorum
// exactly once (one approval.decided), and the agent's begins through
// every replica at once execute it once.
func TestTwoApproversAtOnceReachOneQuorum(t *testing.T) {
	h := newHarness(t, quorumRules())
	engines := []*ledger.Engine{h.eng, h.eng}
	if testBackend == "postgres" {
		st, err := pgstore.Open(context.Background(), pgDSN(), &pgstore.Options{Schema: h.schema})
		if err != nil {
			t.Fatal(err)
		}
		e, err := ledger.New(ledger.Options{Store: st, Secret: h.secret, Policies: h.rules, Clock: h.clock, ReapInterval: -1, PurgeInterval: -1,
			Audit: true, Route: h.routeOrDefault()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close(context.Background()) })
		engines[1] = e
	}
	ctx := context.Background()
	const rounds = 20
	for i := range rounds {
		req := pay("race:"+itoa(int64(i)), "acct_1", 1_500_000_000)
		asked := h.beginWant(req, ledger.DecisionApprovalRequired)
		var wg sync.WaitGroup
		for j, by := range []string{"admin:alice", "admin:bob", "admin:alice"} {
			wg.Go(func() {
				if _, err := engines[j%2].Approve(ctx, asked.ApprovalID, by, ""); err != nil {
					t.Errorf("approve as %s: %v", by, err)
				}
			})
		}
		wg.Wait()
		var executes, others sync.Map
		for j := range 4 {
			wg.Go(func() {
				res, err := engines[j%2].Begin(ctx, req)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Decision == ledger.DecisionExecute {
					executes.Store(j, res.EffectID)
				} else {
					others.Store(j, res.Decision)
				}
			})
		}
		wg.Wait()
		n := 0
		executes.Range(func(any, any) bool { n++; return true })
		if n != 1 {
			t.Errorf("round %d: %d executes of one approved request, want 1", i, n)
		}
		var decided []string
		for _, ev := range approvalEvents(t, h, asked.ApprovalID) {
			if strings.HasPrefix(ev, ledger.EventApprovalDecided) {
				decided = append(decided, ev)
			}
		}
		if len(decided) != 1 {
			t.Errorf("round %d: %d approval.decided events, want 1: %v", i, len(decided), decided)
		}
		h.clock.Advance(time.Second)
	}
}

func TestExplainSaysHowManyPeopleMustApprove(t *testing.T) {
	h := newHarness(t, quorumRules())
	for _, c := range []struct {
		cost int64
		want int
	}{{150_000_000, 0}, {1_000_000_000, 2}, {50_000_000, 0}} {
		ex, err := h.eng.Explain(context.Background(), pay("ex:1", "acct_1", c.cost))
		if err != nil {
			t.Fatal(err)
		}
		if ex.ApproversRequired != c.want {
			t.Errorf("cost %d: approvers_required %d, want %d", c.cost, ex.ApproversRequired, c.want)
		}
	}
}

// TestOnePersonUnderTwoSpellingsCountsOnce: a decider's name in another
// case, in full-width letters, with a zero-width space or surrounding
// spaces (an admin token given a second name that reads the same) is the
// same decider: alice so spelled four more ways is still 1 of 2, and the
// agent's name in another spelling never decides.
func TestOnePersonUnderTwoSpellingsCountsOnce(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, quorumRules())
	req := pay("q:spell", "acct_1", 1_500_000_000)
	asked := h.beginWant(req, ledger.DecisionApprovalRequired)
	approve(t, h.eng, asked.ApprovalID, "admin:alice")
	for _, by := range []string{"admin:Alice", "admin:ＡＬＩＣＥ", "admin:ali\u200bce", " admin:alice ", "ADMIN:alice"} {
		if a := approve(t, h.eng, asked.ApprovalID, by); a.State != ledger.ApprovalPending || len(a.ApprovedBy) != 1 {
			t.Errorf("after %q: state %s, %d approvers; want pending with 1 (alice)", by, a.State, len(a.ApprovedBy))
		}
	}
	for _, by := range []string{"Agent:bot", "ＡＧＥＮＴ:bot", " agent:bot"} {
		_, err := h.eng.Approve(ctx, asked.ApprovalID, by, "")
		wantCode(t, err, ledger.CodeUnauthorized)
	}
	h.beginWant(req, ledger.DecisionApprovalRequired)
	if a := approve(t, h.eng, asked.ApprovalID, "admin:bob"); a.State != ledger.ApprovalApproved {
		t.Errorf("after bob: %s, want approved", a.State)
	}
}

// TestARejectionRacingTheLastApprovalEndsOneWay: alice has approved; bob's
// approval (the last one needed) and carol's rejection come at the same
// moment through two replicas of one PostgreSQL ledger (on Badger, two
// goroutines of one engine): exactly one of them wins, the other is told
// the approval is already decided, one approval.decided is recorded, and
// the agent's begins agree with the winner: one execute, or denied.
func TestARejectionRacingTheLastApprovalEndsOneWay(t *testing.T) {
	h := newHarness(t, quorumRules())
	engines := []*ledger.Engine{h.eng, h.eng}
	if testBackend == "postgres" {
		st, err := pgstore.Open(context.Background(), pgDSN(), &pgstore.Options{Schema: h.schema})
		if err != nil {
			t.Fatal(err)
		}
		e, err := ledger.New(ledger.Options{Store: st, Secret: h.secret, Policies: h.rules, Clock: h.clock, ReapInterval: -1, PurgeInterval: -1,
			Audit: true, Route: h.routeOrDefault()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close(context.Background()) })
		engines[1] = e
	}
	ctx := context.Background()
	for i := range 20 {
		req := pay("racerej:"+itoa(int64(i)), "acct_1", 1_500_000_000)
		asked := h.beginWant(req, ledger.DecisionApprovalRequired)
		approve(t, h.eng, asked.ApprovalID, "admin:alice")
		var wg sync.WaitGroup
		var approveErr, rejectErr error
		wg.Go(func() { _, approveErr = engines[i%2].Approve(ctx, asked.ApprovalID, "admin:bob", "") })
		wg.Go(func() { _, rejectErr = engines[(i+1)%2].Reject(ctx, asked.ApprovalID, "admin:carol", "no") })
		wg.Wait()
		if (approveErr == nil) == (rejectErr == nil) {
			t.Fatalf("round %d: approve err %v, reject err %v; want exactly one to succeed", i, approveErr, rejectErr)
		}
		lost := approveErr
		if lost == nil {
			lost = rejectErr
		}
		wantCode(t, lost, ledger.CodeInvalidStateTransition)
		var decided []string
		for _, ev := range approvalEvents(t, h, asked.ApprovalID) {
			if strings.HasPrefix(ev, ledger.EventApprovalDecided) {
				decided = append(decided, ev)
			}
		}
		if len(decided) != 1 {
			t.Errorf("round %d: approval.decided events %v, want 1", i, decided)
		}
		want := ledger.DecisionDenied
		if approveErr == nil {
			want = ledger.DecisionExecute
		}
		var got []ledger.Decision
		for j := range 2 {
			res, err := engines[j].Begin(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, res.Decision)
		}
		second := ledger.DecisionDenied
		if want == ledger.DecisionExecute {
			second = ledger.DecisionInFlight
		}
		if diff := cmp.Diff([]ledger.Decision{want, second}, got); diff != "" {
			t.Errorf("round %d: the agent's two begins (-want +got):\n%s", i, diff)
		}
		h.clock.Advance(time.Second)
	}
}

// TestARetryAtAHigherCostAfterAQuorumAsksAgain: the agent's begin with
// the same key and payload but a higher estimated cost, while the quorum
// is partly there and once it is reached, never rides on the approvals of
// the lower cost: while pending it is the same request; once approved the
// higher cost is a new request needing two people again (0 so far), and
// the approved cost executes once.
func TestARetryAtAHigherCostAfterAQuorumAsksAgain(t *testing.T) {
	h := newHarness(t, quorumRules())
	req := pay("q:cost", "acct_1", 1_500_000_000)
	more := req
	more.EstimatedCostMicros = i64(9_000_000_000)
	asked := h.beginWant(req, ledger.DecisionApprovalRequired)
	approve(t, h.eng, asked.ApprovalID, "admin:alice")
	if res := h.beginWant(more, ledger.DecisionApprovalRequired); res.ApprovalID != asked.ApprovalID {
		t.Errorf("while pending, the higher cost got approval %s, want the pending %s", res.ApprovalID, asked.ApprovalID)
	}
	approve(t, h.eng, asked.ApprovalID, "admin:bob")
	again := h.beginWant(more, ledger.DecisionApprovalRequired)
	if again.ApprovalID == asked.ApprovalID || !strings.Contains(again.Message, "2 people (0 so far)") {
		t.Errorf("the higher cost after the quorum: approval %s, %q; want a new request of 2 people (0 so far)", again.ApprovalID, again.Message)
	}
}
