package ledger_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger/pgstore"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestAGrantBoundToAnAgentIsNotAnothers: a run id is a label an agent
// declares, so a grant is bound to one agent by naming it (README); another
// agent declaring the same run asks a human.
func TestAGrantBoundToAnAgentIsNotAnothers(t *testing.T) {
	h := newHarness(t, grantRules())
	g := grant(t, h, ledger.GrantRequest{EffectType: "payment.refund", AgentID: "refund-bot", RunID: "run_8812", MaxCostMicros: i64(50_000_000), MaxEffects: i64(20)})
	req := ledger.BeginRequest{IdempotencyKey: "steal", EffectType: "payment.refund", Vendor: "stripe", AgentID: "intruder", RunID: "run_8812",
		Payload: json.RawMessage(`{"to":"attacker"}`), EstimatedCostMicros: i64(40_000_000)}
	if res := h.begin(req); res.GrantID == g.GrantID || res.Decision == ledger.DecisionExecute {
		t.Fatalf("agent %q spent grant %s made for refund-bot: %+v", req.AgentID, g.GrantID, res)
	}
	req.IdempotencyKey, req.AgentID = "mine", "refund-bot"
	if res := h.begin(req); res.Decision != ledger.DecisionExecute || res.GrantID != g.GrantID {
		t.Fatalf("the agent the grant names: %+v", res)
	}
}

// Thresholds: restart between two spenders on the same counter in the same
// window, then spend past the next threshold: each fires once.
func TestThresholdsFireOnceAcrossARestartAndAgainAfterRollover(t *testing.T) {
	rules := []ledger.Rule{{Match: "spend.*", Ceilings: []ledger.Ceiling{{Name: "total", LimitMicros: i64(10), Window: "1h", Per: "global"}}}}
	h := newHarness(t, rules)
	withThresholds(h, 0.5, 1.0)
	ctx := context.Background()
	b := func(k string) {
		if _, err := h.eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: k, EffectType: "spend.x", EstimatedCostMicros: i64(5)}); err != nil {
			t.Fatal(err)
		}
	}
	b("a")
	if got := thresholdEvents(t, h); len(got) != 1 {
		t.Fatalf("after 5/10: %v", got)
	}
	drain(t, h)
	h.reopen()
	b("b")
	if got := thresholdEvents(t, h); !equal(got, []string{"total 1"}) {
		t.Fatalf("after restart and 10/10: %v", got)
	}
}

// Fleet: 3 replicas on one PostgreSQL ledger, 64 concurrent spenders: a
// grant is never exceeded and each threshold fires exactly once.
func TestAGrantAndThresholdsHoldAcrossAFleet(t *testing.T) {
	if testBackend != "postgres" {
		t.Skip("a fleet shares the PostgreSQL backend: the suite's PostgreSQL run has this test")
	}
	rules := append(grantRules(), ledger.Rule{Match: "spend.*", Ceilings: []ledger.Ceiling{{Name: "total", LimitMicros: i64(100), Window: "24h", Per: "global"}}})
	h := newHarness(t, rules)
	withThresholds(h, 0.5, 0.8, 1.0)
	var engines []*ledger.Engine
	for range 3 {
		st, err := pgstore.Open(context.Background(), pgDSN(), &pgstore.Options{Schema: h.schema})
		if err != nil {
			t.Fatal(err)
		}
		e, err := ledger.New(ledger.Options{Store: st, Secret: h.secret, Policies: h.rules, Clock: h.clock, ReapInterval: -1, PurgeInterval: -1,
			Route: func(ledger.Event) []string { return []string{"test-sink"} }, BudgetThresholds: h.thresholds})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close(context.Background()) })
		engines = append(engines, e)
	}
	g := grant(t, h, ledger.GrantRequest{EffectType: "payment.*", AgentID: "bot", MaxCostMicros: i64(100_000_000), MaxEffects: i64(10)})
	ctx := context.Background()
	var mu sync.Mutex
	granted, spent := 0, 0
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			e := engines[i%3]
			for j := range 3 {
				k := itoa(int64(i*10 + j))
				res, err := e.Begin(ctx, pay("p"+k, "acct_1", 5_000_000))
				if err != nil {
					t.Error(err)
					return
				}
				res2, err := e.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "s" + k, EffectType: "spend.x", EstimatedCostMicros: i64(1)})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if res.Decision == ledger.DecisionExecute {
					granted++
				}
				if res2.Decision == ledger.DecisionExecute {
					spent++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	got := grantByID(t, h, g.GrantID)
	if granted != 10 {
		t.Fatalf("granted != 10: granted %d (used %d effects, %d micros), spent %d", granted, got.UsedEffects, got.UsedCostMicros, spent)
	}
	if got.UsedEffects != 10 {
		t.Fatalf("got.UsedEffects != 10: granted %d (used %d effects, %d micros), spent %d", granted, got.UsedEffects, got.UsedCostMicros, spent)
	}
	if spent != 100 {
		t.Fatalf("spent != 100: granted %d (used %d effects, %d micros), spent %d", granted, got.UsedEffects, got.UsedCostMicros, spent)
	}
	if ev := thresholdEvents(t, h); !equal(ev, []string{"total 0.5", "total 0.8", "total 1"}) {
		t.Fatalf("thresholds on the fleet: %v", ev)
	}
}
