package ledger_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// grantRules send every payment of $1 or more to a human, and keep a
// $500 daily ceiling.
func grantRules() []ledger.Rule {
	return []ledger.Rule{{Match: "payment.*", ApprovalThresholdMicros: i64(1_000_000),
		Ceilings: []ledger.Ceiling{{Name: "daily", LimitMicros: i64(500_000_000), Window: "24h", Per: "global"}}}}
}

func grant(t *testing.T, h *harness, req ledger.GrantRequest) *ledger.Grant {
	t.Helper()
	if req.Namespace == "" {
		req.Namespace = "default"
	}
	if req.ExpiresAt.IsZero() {
		req.ExpiresAt = h.clock.Now().Add(time.Hour)
	}
	req.CreatedBy = "admin:alice"
	g, err := h.eng.CreateGrant(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func grantByID(t *testing.T, h *harness, id string) ledger.Grant {
	t.Helper()
	all, err := h.eng.ListGrants(context.Background(), "", true)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range all {
		if g.GrantID == id {
			return g
		}
	}
	t.Fatalf("no grant %s in %+v", id, all)
	return ledger.Grant{}
}

func TestAGrantIsNeverExceededUnder64ConcurrentBegins(t *testing.T) {
	cases := []struct {
		name          string
		cost          func(i int) int64
		wantExecuted  int // -1: any, within the bounds
		wantUsedMicro int64
	}{
		{"the money binds: $15 each", func(int) int64 { return 15_000_000 }, 6, 90_000_000},
		{"the count binds: $5 each", func(int) int64 { return 5_000_000 }, 10, 50_000_000},
		{"mixed costs", func(i int) int64 { return int64(1+i*7%30) * 1_000_000 }, -1, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, grantRules())
			g := grant(t, h, ledger.GrantRequest{EffectType: "payment.*", AgentID: "bot", MaxCostMicros: i64(100_000_000), MaxEffects: i64(10)})
			var wg sync.WaitGroup
			var mu sync.Mutex
			executed, spent, asked := 0, int64(0), 0
			start := make(chan struct{})
			for i := range 64 {
				wg.Go(func() {
					<-start
					cost := c.cost(i)
					res, err := h.eng.Begin(context.Background(), pay("g:"+itoa(int64(i)), "acct_1", cost))
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					defer mu.Unlock()
					switch res.Decision {
					case ledger.DecisionExecute:
						if res.GrantID != g.GrantID {
							t.Errorf("an execute without its grant: %+v", res)
						}
						executed++
						spent += cost
					case ledger.DecisionApprovalRequired:
						asked++
					default:
						t.Errorf("decision %s (%s)", res.Decision, res.Message)
					}
				})
			}
			close(start)
			wg.Wait()
			got := grantByID(t, h, g.GrantID)
			if executed > 10 {
				t.Fatalf("executed > 10: %d executed for $%d (and %d asked): the grant of $100 / 10 effects was exceeded", executed, spent/1_000_000, asked)
			}
			if spent > 100_000_000 {
				t.Fatalf("spent > 100_000_000: %d executed for $%d (and %d asked): the grant of $100 / 10 effects was exceeded", executed, spent/1_000_000, asked)
			}
			if executed+asked != 64 {
				t.Fatalf("executed+asked != 64: %d executed for $%d (and %d asked): the grant of $100 / 10 effects was exceeded", executed, spent/1_000_000, asked)
			}
			if got.UsedEffects != int64(executed) {
				t.Fatalf("got.UsedEffects != int64(executed): the grant counted %d effects, %d micros; %d executed for %d", got.UsedEffects, got.UsedCostMicros, executed, spent)
			}
			if got.UsedCostMicros != spent {
				t.Fatalf("got.UsedCostMicros != spent: the grant counted %d effects, %d micros; %d executed for %d", got.UsedEffects, got.UsedCostMicros, executed, spent)
			}
			if c.wantExecuted >= 0 && (executed != c.wantExecuted || spent != c.wantUsedMicro) {
				t.Fatalf("%d executed for %d micros, want %d for %d", executed, spent, c.wantExecuted, c.wantUsedMicro)
			}
		})
	}
}

func TestAGrantCoversOnlyItsScopeAndCeilingsStillApply(t *testing.T) {
	h := newHarness(t, grantRules())
	ctx := context.Background()
	g := grant(t, h, ledger.GrantRequest{EffectType: "payment.refund", RunID: "run-1", MaxCostMicros: i64(400_000_000)})
	req := func(key, typ, agent, run string, cost int64) ledger.BeginRequest {
		r := pay(key, "acct_1", cost)
		r.EffectType, r.AgentID, r.RunID = typ, agent, run
		return r
	}
	// Another type, another run, no run: a human is asked.
	h.beginWant(req("other-type", "payment.charge", "bot", "run-1", 2_000_000), ledger.DecisionApprovalRequired)
	h.beginWant(req("other-run", "payment.refund", "bot", "run-2", 2_000_000), ledger.DecisionApprovalRequired)
	h.beginWant(req("no-run", "payment.refund", "bot", "", 2_000_000), ledger.DecisionApprovalRequired)
	// Inside it: executes, whichever agent.
	if res := h.beginWant(req("in", "payment.refund", "bot-2", "run-1", 300_000_000), ledger.DecisionExecute); res.GrantID != g.GrantID {
		t.Fatalf("grant_id %q", res.GrantID)
	}
	// The ceiling ($500 a day) refuses before the grant is asked: $300
	// counted, $250 more does not fit.
	res := h.beginWant(req("over-ceiling", "payment.refund", "bot", "run-1", 250_000_000), ledger.DecisionDenied)
	if res.Reason != ledger.ReasonBudgetExceeded {
		t.Fatalf("reason %s", res.Reason)
	}
	// Past what the grant has left ($100): a human is asked.
	h.beginWant(req("over-grant", "payment.refund", "bot", "run-1", 150_000_000), ledger.DecisionApprovalRequired)
	// Revoked: a human is asked again.
	if r, err := h.eng.RevokeGrant(ctx, g.GrantID, "admin:bob"); err != nil || r.State != ledger.GrantRevoked || r.RevokedBy != "admin:bob" {
		t.Fatalf("revoke: %+v %v", r, err)
	}
	h.beginWant(req("after-revoke", "payment.refund", "bot", "run-1", 2_000_000), ledger.DecisionApprovalRequired)
	if live, _ := h.eng.ListGrants(ctx, "default", false); len(live) != 0 {
		t.Fatalf("a revoked grant is listed as live: %+v", live)
	}

	// Expired: a human is asked.
	g2 := grant(t, h, ledger.GrantRequest{EffectType: "payment.*", AgentID: "bot", MaxEffects: i64(5)})
	h.clock.Advance(2 * time.Hour)
	h.beginWant(req("after-expiry", "payment.charge", "bot", "", 2_000_000), ledger.DecisionApprovalRequired)
	if got := grantByID(t, h, g2.GrantID); got.State != ledger.GrantExpired || got.UsedEffects != 0 {
		t.Fatalf("expired grant: %+v", got)
	}
}

func TestAGrantDecidesARequestThatIsWaiting(t *testing.T) {
	h := newHarness(t, grantRules())
	ctx := context.Background()
	ask := h.beginWant(pay("waiting", "acct_1", 20_000_000), ledger.DecisionApprovalRequired)
	g := grant(t, h, ledger.GrantRequest{EffectType: "payment.charge", AgentID: "bot", MaxCostMicros: i64(50_000_000)})
	res := h.beginWant(pay("waiting", "acct_1", 20_000_000), ledger.DecisionExecute)
	if res.GrantID != g.GrantID {
		t.Fatalf("res.GrantID != g.GrantID: execute: %+v", res)
	}
	if res.EffectID != ask.EffectID {
		t.Fatalf("res.EffectID != ask.EffectID: execute: %+v", res)
	}
	eff := h.get(res.EffectID)
	if eff.Approval == nil {
		t.Fatalf("eff.Approval == nil: the request: %+v", eff.Approval)
	}
	if eff.Approval.State != ledger.ApprovalApproved {
		t.Fatalf("eff.Approval.State != ledger.ApprovalApproved: the request: %+v", eff.Approval)
	}
	if eff.Approval.DecidedBy != "grant:"+g.GrantID {
		t.Fatalf("eff.Approval.DecidedBy != \"grant:\"+g.GrantID: the request: %+v", eff.Approval)
	}
	var decided []ledger.Event
	for _, ev := range eventsOf(t, h, ledger.EventApprovalDecided) {
		if ev.ApprovalID == ask.ApprovalID {
			decided = append(decided, ev)
		}
	}
	type grantDecision struct {
		GrantID string
		State   ledger.State
	}
	var got []grantDecision
	for _, ev := range decided {
		got = append(got, grantDecision{ev.GrantID, ev.State})
	}
	if diff := cmp.Diff([]grantDecision{{g.GrantID, ledger.StateApproved}}, got); diff != "" {
		t.Fatalf("approval.decided (-want +got):\n%s", diff)
	}
	// An operator now finds it decided.
	_, err := h.eng.Reject(ctx, ask.ApprovalID, "alice", "")
	wantCode(t, err, ledger.CodeInvalidStateTransition)
}

func TestGrantRequestsAreChecked(t *testing.T) {
	h := newHarness(t, grantRules())
	ctx := context.Background()
	now := h.clock.Now()
	cases := map[string]ledger.GrantRequest{
		"no bound":           {Namespace: "default", EffectType: "payment.*", AgentID: "bot", ExpiresAt: now.Add(time.Hour)},
		"no agent or run":    {Namespace: "default", EffectType: "payment.*", MaxEffects: i64(1), ExpiresAt: now.Add(time.Hour)},
		"in the past":        {Namespace: "default", EffectType: "payment.*", AgentID: "bot", MaxEffects: i64(1), ExpiresAt: now.Add(-time.Minute)},
		"too far ahead":      {Namespace: "default", EffectType: "payment.*", AgentID: "bot", MaxEffects: i64(1), ExpiresAt: now.Add(100 * 24 * time.Hour)},
		"not a glob":         {Namespace: "default", EffectType: "Payment[", AgentID: "bot", MaxEffects: i64(1), ExpiresAt: now.Add(time.Hour)},
		"a negative amount":  {Namespace: "default", EffectType: "payment.*", AgentID: "bot", MaxCostMicros: i64(-1), ExpiresAt: now.Add(time.Hour)},
		"a bad namespace":    {Namespace: "Shop!", EffectType: "payment.*", AgentID: "bot", MaxEffects: i64(1), ExpiresAt: now.Add(time.Hour)},
		"zero effects":       {Namespace: "default", EffectType: "payment.*", AgentID: "bot", MaxEffects: i64(0), ExpiresAt: now.Add(time.Hour)},
		"no effect type":     {Namespace: "default", AgentID: "bot", MaxEffects: i64(1), ExpiresAt: now.Add(time.Hour)},
		"a control in a run": {Namespace: "default", EffectType: "payment.*", RunID: "run\x00", MaxEffects: i64(1), ExpiresAt: now.Add(time.Hour)},
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := h.eng.CreateGrant(ctx, req)
			wantCode(t, err, ledger.CodeInvalidArgument)
		})
	}
	_, err := h.eng.RevokeGrant(ctx, "grt_nope", "alice")
	wantCode(t, err, ledger.CodeGrantNotFound)
}
