package main

import (
	"strings"
	"testing"
)

// TestTwoAdminsApproveThroughTheCLI: a rule needing two approvers on a
// real serve; alice approves through the CLI and sees "1 of 2", alice
// again changes nothing, the agent's begin still waits and its token
// cannot approve; bob's approval makes it usable and the agent executes.
func TestTwoAdminsApproveThroughTheCLI(t *testing.T) {
	extra := "auth:\n  agents: [{token_sha256: '" + sha("agent-tok") + "', namespace: default, agent_id: bot}]\n" +
		"  admins: [{token_sha256: '" + sha("alice-tok") + "', name: alice}, {token_sha256: '" + sha("bob-tok") + "', name: bob}]\n" +
		"policies:\n  - match: 'payment.*'\n    approval_threshold_micros: 100000000\n    approvers_required: 2\n"
	s := startServe(t, t.TempDir()+"/data", extra)
	cs := connect(t, s.mcp, "agent-tok")
	pay := map[string]any{"idempotency_key": "inv:two", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}
	a := callTool(t, cs, "ratchet_begin_effect", pay)
	if a["decision"] != "approval_required" {
		t.Fatalf("begin: %v", a)
	}
	id := a["approval_id"].(string)
	for range 2 { // the same person twice counts once
		code, out, errs := cli(t, "alice-tok", nil, "approvals", "approve", id, "--admin", s.admin)
		if code != 0 || !strings.Contains(out, "pending, 1 of 2: approved by admin:alice") {
			t.Fatalf("alice approves: %d %q %s", code, out, errs)
		}
	}
	if code, _, errs := cli(t, "agent-tok", nil, "approvals", "approve", id, "--admin", s.admin); code != 1 || !strings.Contains(errs, "agent tokens cannot use the admin API") {
		t.Errorf("the agent approves: %d %q, want refused", code, errs)
	}
	if got := callTool(t, cs, "ratchet_begin_effect", pay); got["decision"] != "approval_required" {
		t.Fatalf("begin after one of two: %v", got)
	}
	code, out, errs := cli(t, "bob-tok", nil, "approvals", "list", "--admin", s.admin)
	if code != 0 || !strings.Contains(out, "APPROVERS") || !strings.Contains(out, "1 of 2: approved by admin:alice") {
		t.Errorf("approvals list: %d %q %s", code, out, errs)
	}
	code, out, errs = cli(t, "bob-tok", nil, "approvals", "approve", id, "--admin", s.admin)
	if code != 0 || !strings.Contains(out, "approved by admin:bob") {
		t.Fatalf("bob approves: %d %q %s", code, out, errs)
	}
	if got := callTool(t, cs, "ratchet_begin_effect", pay); got["decision"] != "execute" {
		t.Errorf("begin after two of two: %v", got)
	}
}
