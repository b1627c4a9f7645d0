package main

import (
	"context"
	"testing"

	"github.com/ratchet-mcp/ratchet/admin"
)

// TestAFleetOfProcessesCountsWhatEffectsSettleAt: three "ratchet serve"
// processes on one PostgreSQL ledger, a global ceiling of $100. An agent
// begins $10 through the first and reports it succeeded at $90, passing
// back the begin's answer unchanged; through the second, $80 more is then
// refused, as one process refuses it, and the last $10 goes through the
// third. The operator's listing counts $100.
func TestAFleetOfProcessesCountsWhatEffectsSettleAt(t *testing.T) {
	servers := startFleet(t, 3, "policies:\n  - match: 'fleet.*'\n    ceilings:\n"+
		"      - {name: fleet-spend, limit_micros: 100000000, window: 24h, per: global}\n")
	charge := func(s *server, key string, cost int64) map[string]any {
		t.Helper()
		return callTool(t, connect(t, s.mcp), "ratchet_begin_effect", map[string]any{
			"idempotency_key": key, "effect_type": "fleet.charge", "estimated_cost_micros": cost})
	}
	a := charge(servers[0], "inv:a", 10_000_000)
	if a["decision"] != "execute" {
		t.Fatalf("a: %v", a)
	}
	callTool(t, connect(t, servers[0].mcp), "ratchet_report_effect", map[string]any{
		"effect_id": a["effect_id"], "attempt": a["attempt"], "outcome": "succeeded", "actual_cost_micros": 90_000_000})
	b := charge(servers[1], "inv:b", 80_000_000)
	if b["decision"] != "denied" {
		t.Fatalf("b, $80 after $90 settled through another process: %v, want denied", b["decision"])
	}
	if c, _ := b["ceiling"].(map[string]any); c == nil || c["counted"] != float64(90_000_000) {
		t.Errorf("b refused with ceiling %v, want 90000000 counted", b["ceiling"])
	}
	if c := charge(servers[2], "inv:c", 10_000_000); c["decision"] != "execute" {
		t.Fatalf("c, the last $10: %v", c["decision"])
	}
	if d := charge(servers[0], "inv:d", 1); d["decision"] != "denied" {
		t.Fatalf("d, past the ceiling: %v", d["decision"])
	}
	bs, err := (&admin.Client{URL: servers[1].admin}).Budgets(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 1 || bs[0].Counted != 100_000_000 {
		t.Errorf("budgets: %+v, want fleet-spend counting 100000000", bs)
	}
}
