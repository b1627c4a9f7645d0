package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
)

func TestGrantsFromTheCLI(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	extra := "auth:\n  agents: [{token_sha256: '" + sha("agent-tok") + "', namespace: default, agent_id: bot}]\n" +
		"  admins: [{token_sha256: '" + sha("admin-tok") + "', name: alice}]\n" +
		"policies:\n  - match: 'payment.*'\n    approval_threshold_micros: 100000000\n"
	s := startServe(t, data, extra)
	cs := connect(t, s.mcp, "agent-tok")
	pay := func(key string) map[string]any {
		return callTool(t, cs, "ratchet_begin_effect", map[string]any{"idempotency_key": key, "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000})
	}

	code, out, errs := cli(t, "admin-tok", nil, "grants", "create", "--effect-type", "payment.*", "--agent-id", "bot",
		"--max-effects", "1", "--max-cost-micros", "400000000", "--ttl", "1h", "--note", "month-end refunds", "-o", "json", "--admin", s.admin)
	var g ledger.Grant
	if code != 0 || json.Unmarshal([]byte(out), &g) != nil || g.GrantID == "" || g.CreatedBy != "admin:alice" {
		t.Fatalf("grants create: %d %s %s", code, out, errs)
	}
	if ex := pay("inv:1"); ex["decision"] != "execute" || ex["grant_id"] != g.GrantID {
		t.Fatalf("a begin inside the grant: %v", ex)
	}
	// Used up (one effect): the next one goes to a human, and the answer
	// says when to ask again and when the request lapses.
	ask := pay("inv:2")
	if ask["decision"] != "approval_required" || ask["retry_after_seconds"] != float64(30) || ask["expires_at"] == nil {
		t.Fatalf("after the grant: %v", ask)
	}
	code, out, errs = cli(t, "admin-tok", nil, "grants", "list", "--all", "--admin", s.admin)
	if code != 0 || !strings.Contains(out, g.GrantID) || !strings.Contains(out, "exhausted") {
		t.Fatalf("grants list: %d %s %s", code, out, errs)
	}
	code, out, errs = cli(t, "admin-tok", nil, "grants", "revoke", g.GrantID, "--admin", s.admin)
	if code != 0 || !strings.Contains(out, "revoked by admin:alice") {
		t.Fatalf("grants revoke: %d %s %s", code, out, errs)
	}
	// An agent's token cannot grant.
	if code, _, errs := cli(t, "agent-tok", nil, "grants", "create", "--effect-type", "*", "--agent-id", "bot", "--max-effects", "9", "--ttl", "1h", "--admin", s.admin); code != 1 || !strings.Contains(errs, "agent tokens") {
		t.Fatalf("an agent's grant: %d %s", code, errs)
	}
	if code, out, errs := cli(t, "admin-tok", nil, "outbox", "--dead", "--admin", s.admin); code != 0 || !strings.Contains(out, "EVENT") {
		t.Fatalf("outbox: %d %s %s", code, out, errs)
	}
}
