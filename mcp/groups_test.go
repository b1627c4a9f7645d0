package mcp_test

import (
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/mcp"
)

// twoAgents serves one engine over HTTP with a token for alice and one for
// mallory, each fixing its agent_id in namespace shop, and connects both
// with the SDK's client.
func twoAgents(t *testing.T) (alice, mallory *sdk.ClientSession, c *clock) {
	t.Helper()
	c = &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	url := serveHTTP(t, newEngine(t, c), &mcp.HTTPOptions{Agents: hashes(map[string]mcp.Identity{
		"tok-alice":   {Namespace: "shop", AgentID: "alice-bot"},
		"tok-mallory": {Namespace: "shop", AgentID: "mallory-bot"},
	})})
	var err error
	if alice, err = httpClient(t, url, "tok-alice"); err != nil {
		t.Fatal(err)
	}
	if mallory, err = httpClient(t, url, "tok-mallory"); err != nil {
		t.Fatal(err)
	}
	return alice, mallory, c
}

// bookHotel is alice's step of her trip group, done and reported.
func bookHotel(t *testing.T, alice *sdk.ClientSession) map[string]any {
	t.Helper()
	hotel := decision(t, alice, map[string]any{"idempotency_key": "hotel", "effect_type": "hotel.book", "group_key": "trip:alice",
		"compensation": map[string]any{"effect_type": "hotel.cancel", "payload": map[string]any{"res": "H1"}, "description": "cancel reservation H1"}}, "execute")
	if out, res := call(t, alice, "ratchet_report_effect", map[string]any{"effect_id": hotel["effect_id"], "attempt": 1, "outcome": "succeeded"}); res.IsError {
		t.Fatalf("report: %v", out)
	}
	return hotel
}

// firstUndo is the first compensation alice's unwind returns, as the
// client decoded it.
func firstUndo(t *testing.T, alice *sdk.ClientSession) map[string]any {
	t.Helper()
	plan, res := call(t, alice, "ratchet_unwind_group", map[string]any{"group_key": "trip:alice", "reason": "trip cancelled"})
	comps, _ := plan["compensations"].([]any)
	if res.IsError || len(comps) != 1 {
		t.Fatalf("alice's unwind: %v", plan)
	}
	return comps[0].(map[string]any)
}

// TestAnotherAgentCannotJoinMyGroupOverMCP: mallory's begin with alice's
// group_key is refused, so alice's own unwind is not blocked by it.
func TestAnotherAgentCannotJoinMyGroupOverMCP(t *testing.T) {
	alice, mallory, _ := twoAgents(t)
	bookHotel(t, alice)
	e := toolErr(t, mallory, "ratchet_begin_effect", map[string]any{"idempotency_key": "m1", "effect_type": "email.send", "group_key": "trip:alice"}, "unauthorized")
	if e["field"] != "group_key" {
		t.Errorf("refusal names field %v, want group_key", e["field"])
	}
	toolErr(t, mallory, "ratchet_unwind_group", map[string]any{"group_key": "trip:alice"}, "unauthorized")
	firstUndo(t, alice) // alice's unwind is answered
}

// TestAnUnwindEntryIsBegunUnchanged: alice passes the entry her unwind
// returned, description and all, straight back as begin's arguments, as an
// LLM does; it executes although mallory took the old guessable undo key
// first, and the group ends unwound.
func TestAnUnwindEntryIsBegunUnchanged(t *testing.T) {
	alice, mallory, _ := twoAgents(t)
	hotel := bookHotel(t, alice)
	decision(t, mallory, map[string]any{"idempotency_key": "undo:hotel", "effect_type": "email.send"}, "execute")
	entry := firstUndo(t, alice)
	if entry["description"] != "cancel reservation H1" {
		t.Errorf("entry %v lacks the declared description", entry)
	}
	undo := decision(t, alice, entry, "execute")
	if out, res := call(t, alice, "ratchet_report_effect", map[string]any{"effect_id": undo["effect_id"], "attempt": 1, "outcome": "succeeded"}); res.IsError {
		t.Fatalf("report of the undo: %v", out)
	}
	plan, _ := call(t, alice, "ratchet_unwind_group", map[string]any{"group_key": "trip:alice"})
	if plan["state"] != "unwound" {
		t.Errorf("group is %v, want unwound", plan["state"])
	}
	got, _ := call(t, alice, "ratchet_get_effect", map[string]any{"effect_id": hotel["effect_id"]})
	if got["state"] != "compensated" {
		t.Errorf("the step is %v, want compensated", got["state"])
	}
	// A description on an ordinary begin is refused, naming the field.
	if e := toolErr(t, alice, "ratchet_begin_effect", map[string]any{"idempotency_key": "x", "effect_type": "email.send", "description": "hi"}, "invalid_argument"); e["field"] != "description" {
		t.Errorf("refusal names field %v, want description", e["field"])
	}
}

// TestAnotherAgentCannotPerformOrReportMyUndoOverMCP: mallory, given alice's
// undo entry, cannot begin it, nor report alice's begun undo succeeded:
// alice's step stays succeeded until alice's undo is done.
func TestAnotherAgentCannotPerformOrReportMyUndoOverMCP(t *testing.T) {
	alice, mallory, _ := twoAgents(t)
	hotel := bookHotel(t, alice)
	entry := firstUndo(t, alice)
	if e := toolErr(t, mallory, "ratchet_begin_effect", entry, "unauthorized"); e["field"] != "compensates_effect_id" {
		t.Errorf("refusal names field %v, want compensates_effect_id", e["field"])
	}
	undo := decision(t, alice, entry, "execute")
	toolErr(t, mallory, "ratchet_report_effect", map[string]any{"effect_id": undo["effect_id"], "attempt": 1, "outcome": "succeeded"}, "unauthorized")
	got, _ := call(t, alice, "ratchet_get_effect", map[string]any{"effect_id": hotel["effect_id"]})
	if got["state"] != "succeeded" {
		t.Errorf("alice's step is %v after mallory's attempts, want succeeded", got["state"])
	}
}

// TestAReportOfALargeResultOverMCP: a 200 KB result reported over HTTP is
// recorded succeeded, and the answer says what was kept.
func TestAReportOfALargeResultOverMCP(t *testing.T) {
	alice, _, _ := twoAgents(t)
	b := decision(t, alice, map[string]any{"idempotency_key": "export", "effect_type": "report.export"}, "execute")
	result := map[string]any{"id": "exp_1", "status": "done", "rows": strings.Repeat("r", 200_000)}
	out, res := call(t, alice, "ratchet_report_effect", map[string]any{"effect_id": b["effect_id"], "attempt": 1, "outcome": "succeeded", "result": result})
	if res.IsError {
		t.Fatalf("the report of a large result was refused: %v", out)
	}
	note, _ := out["result_note"].(string)
	if out["state"] != "succeeded" || !strings.Contains(note, "top-level fields id, status") {
		t.Errorf("answer %v, want succeeded with a result_note naming what was kept", out)
	}
	if text := res.Content[0].(*sdk.TextContent).Text; !strings.Contains(text, "over the 65536-byte limit") {
		t.Errorf("summary %q does not say the result was cut", text)
	}
	dup := decision(t, alice, map[string]any{"idempotency_key": "export", "effect_type": "report.export"}, "duplicate")
	if r, _ := dup["result"].(map[string]any); r["id"] != "exp_1" || r["result_omitted"] == nil {
		t.Errorf("the duplicate's result %v, want the summary", dup["result"])
	}
}
