package mcp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/mcp"
)

// TestAnAgentCannotBeginItsWayAroundAHalt: an agent that passes Ratchet's
// answers back unchanged, and one that tries a new key, another effect
// type in the halted glob, or a grant's cover, is denied with reason halted
// and the operator's note each time; the tools list no way to approve or
// lift anything.
func TestAnAgentCannotBeginItsWayAroundAHalt(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	eng := newEngine(t, c)
	cs := inMemory(t, mcp.New(eng, nil))
	ctx := context.Background()
	hl, err := eng.Halt(ctx, ledger.HaltRequest{HaltScope: ledger.HaltScope{EffectType: "payment.*"}, Note: "card testing attack", CreatedBy: "admin:alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.CreateGrant(ctx, ledger.GrantRequest{Namespace: "default", EffectType: "payment.*", AgentID: "bot", MaxEffects: i64(9), ExpiresAt: c.Now().Add(time.Hour), CreatedBy: "admin:alice"}); err != nil {
		t.Fatal(err)
	}
	for _, args := range []map[string]any{
		pay("p:1", 1_000_000),
		pay("p:1", 1_000_000), // the same again, as an agent retries
		pay("p:2-another-key", 1_000_000),
		{"idempotency_key": "p:3", "effect_type": "payment.refund", "dimensions": map[string]any{"counterparty": "acct_1"}, "estimated_cost_micros": 5},
		pay("p:4-big", 120_000_000), // over the approval threshold: the grant would cover it
	} {
		out := decision(t, cs, args, "denied")
		if out["reason"] != ledger.ReasonHalted {
			t.Errorf("begin %v: reason %v, want halted", args["idempotency_key"], out["reason"])
		}
		if msg, _ := out["message"].(string); !strings.Contains(msg, "card testing attack") {
			t.Errorf("begin %v: message %q lacks the operator's note", args["idempotency_key"], msg)
		}
		if out["halt_id"] != hl.HaltID {
			t.Errorf("begin %v: halt_id %v, want %s", args["idempotency_key"], out["halt_id"], hl.HaltID)
		}
	}
	decision(t, cs, map[string]any{"idempotency_key": "e:1", "effect_type": "email.send"}, "execute")
	tools, err := cs.ListTools(ctx, &sdk.ListToolsParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools.Tools {
		if strings.Contains(tl.Name, "approve") || strings.Contains(tl.Name, "halt") || strings.Contains(tl.Name, "resume") || strings.Contains(tl.Name, "grant") {
			t.Errorf("agents are offered tool %s", tl.Name)
		}
		if tl.Name == "ratchet_begin_effect" && !strings.Contains(tl.Description, "reason halted") {
			t.Errorf("the begin tool does not say what halted asks of the agent")
		}
	}
	if hs, _ := eng.ListHalts(ctx); len(hs) != 1 {
		t.Errorf("%d halts after the agent's tries, want 1", len(hs))
	}
}
