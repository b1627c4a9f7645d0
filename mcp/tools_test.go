package mcp_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/mcp"
)

func TestToolsList(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	cs := inMemory(t, mcp.New(newEngine(t, c), nil))
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*sdk.Tool{}
	for _, tool := range res.Tools {
		byName[tool.Name] = tool
	}
	want := map[string]bool{ // name → read-only
		"ratchet_begin_effect": false, "ratchet_report_effect": false, "ratchet_resolve_effect": false,
		"ratchet_unwind_group": false, "ratchet_get_effect": true, "ratchet_list_effects": true,
	}
	if len(byName) != len(want) {
		t.Fatalf("tools: %v", byName)
	}
	for name, ro := range want {
		tool := byName[name]
		if tool == nil || tool.Annotations == nil || tool.Annotations.ReadOnlyHint != ro || tool.OutputSchema == nil || tool.Description == "" {
			t.Fatalf("%s: %+v", name, tool)
		}
	}
	if !byName["ratchet_begin_effect"].Annotations.IdempotentHint || !*byName["ratchet_begin_effect"].Annotations.OpenWorldHint {
		t.Fatal("begin must be idempotent and open-world")
	}
	schema := toMap(t, byName["ratchet_begin_effect"].InputSchema)
	req := schema["required"].([]any)
	if len(req) != 2 || req[0] != "idempotency_key" || req[1] != "effect_type" {
		t.Fatalf("required: %v", req)
	}
	props := schema["properties"].(map[string]any)
	key := props["idempotency_key"].(map[string]any)
	if key["maxLength"] != float64(255) || key["minLength"] != float64(1) || !strings.Contains(key["description"].(string), "Never use a random value") {
		t.Fatalf("idempotency_key schema: %v", key)
	}
	if props["estimated_cost_micros"].(map[string]any)["minimum"] != float64(0) {
		t.Fatal("cost has no minimum")
	}
	for name, p := range props {
		if p.(map[string]any)["description"] == "" {
			t.Fatalf("%s has no description", name)
		}
	}
	rep := toMap(t, byName["ratchet_report_effect"].InputSchema)["properties"].(map[string]any)
	if enum := rep["outcome"].(map[string]any)["enum"].([]any); len(enum) != 3 {
		t.Fatalf("outcome enum: %v", enum)
	}
	// The seed's rules each appear in the begin description, once.
	desc := byName["ratchet_begin_effect"].Description
	for _, rule := range []string{"immediately before", "execute", "duplicate", "in_flight", "blocked", "approval_required", "denied",
		"budget_warning", "integration_warning", "enforced", "ratchet_report_effect", "ratchet_resolve_effect"} {
		if !strings.Contains(desc, rule) {
			t.Errorf("begin description lacks %q", rule)
		}
	}
	if n := strings.Count(desc, "budget_warning"); n != 1 {
		t.Errorf("budget_warning explained %d times", n)
	}
}

// TestAReportAnswersWithWhatSettled: a report's answer is the effect's
// fields its output schema lists, structured and as the same JSON in its
// second text item; the agent sent the rest, and ratchet_get_effect returns
// the whole record.
func TestAReportAnswersWithWhatSettled(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	cs := inMemory(t, mcp.New(newEngine(t, c), nil))
	b := decision(t, cs, map[string]any{"idempotency_key": "mail:1", "effect_type": "email.send"}, "execute")
	out, res := call(t, cs, "ratchet_report_effect", map[string]any{"effect_id": b["effect_id"], "attempt": 1, "outcome": "succeeded",
		"result": map[string]any{"id": "msg_1"}, "vendor_reference": "msg_1", "actual_cost_micros": 10})
	want := map[string]any{"effect_id": b["effect_id"], "idempotency_key": "mail:1", "state": "succeeded", "attempt": float64(1),
		"result": map[string]any{"id": "msg_1"}, "vendor_reference": "msg_1"}
	if diff := gocmp.Diff(want, out); diff != "" {
		t.Errorf("report's answer (-want +got):\n%s", diff)
	}
	var text map[string]any
	if err := json.Unmarshal([]byte(res.Content[1].(*sdk.TextContent).Text), &text); err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff(out, text); diff != "" {
		t.Errorf("the text JSON differs from the structured content (-structured +text):\n%s", diff)
	}
	eff, _ := call(t, cs, "ratchet_get_effect", map[string]any{"effect_id": b["effect_id"]})
	if eff["namespace"] != "default" || eff["actual_cost_micros"] != float64(10) || eff["completed_at"] == nil {
		t.Errorf("get's answer %v, want the whole record", eff)
	}
}
