package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// conversationConfig is a serve with an agent, an operator and a payment
// threshold; console is the console's public address (notify.console_url),
// or "" for none.
func conversationConfig(console string) string {
	cfg := "auth:\n  agents: [{token_sha256: '" + sha("agent-tok") + "', namespace: default, agent_id: bot}]\n" +
		"  admins: [{token_sha256: '" + sha("admin-tok") + "', name: alice}]\n" +
		"policies:\n  - match: 'payment.*'\n    approval_threshold_micros: 100000000\n"
	if console != "" {
		cfg += "notify:\n  console_url: '" + console + "'\n"
	}
	return cfg
}

// TestApprovalRequiredSaysWhereToDecide (issue 37.1): with the console's
// public address configured, a real serve's approval_required answer
// carries the approval's console page and its expiry, and its one-line
// text tells the agent to show the page to its user; without it, the
// answer has no approval_url.
func TestApprovalRequiredSaysWhereToDecide(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com/"))
	cs := connect(t, s.mcp, "agent-tok")
	pay := map[string]any{"idempotency_key": "inv:big", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}
	res := callResult(t, cs, pay)
	a := res.StructuredContent.(map[string]any)
	if a["decision"] != "approval_required" {
		t.Fatalf("begin: %v", a)
	}
	want := "https://ratchet.example.com/approvals/" + a["approval_id"].(string)
	if diff := cmp.Diff(want, a["approval_url"]); diff != "" {
		t.Errorf("approval_url (-want +got):\n%s", diff)
	}
	if exp, err := time.Parse(time.RFC3339, a["expires_at"].(string)); err != nil || !exp.After(time.Now()) {
		t.Errorf("expires_at %v: %v", a["expires_at"], err)
	}
	if text := res.Content[0].(*sdk.TextContent).Text; !strings.Contains(text, "Show the user where an operator decides: "+want) {
		t.Errorf("the summary does not tell the agent to show the page: %q", text)
	}

	plain := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig(""))
	b := callResult(t, connect(t, plain.mcp, "agent-tok"), pay).StructuredContent.(map[string]any)
	if _, ok := b["approval_url"]; ok {
		t.Errorf("without notify.console_url the answer carries approval_url %v", b["approval_url"])
	}
}

func callResult(t *testing.T, cs *sdk.ClientSession, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("begin: %v %+v", err, res)
	}
	return res
}
