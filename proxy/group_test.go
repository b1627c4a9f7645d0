package proxy_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/proxy"
)

// TestAProxiedCallCannotJoinAnotherAgentsGroup: a local process that sends
// Ratchet-Group-Key naming a token-fixed agent's group is refused in the
// vendor's shape (403, nothing sent), so it cannot block that agent's
// unwind; the agent's unwind is then answered.
func TestAProxiedCallCannotJoinAnotherAgentsGroup(t *testing.T) {
	up, hits := fixedAnswer(200, "application/json", []byte(`{"id":"pi_1","object":"payment_intent"}`))
	defer up.Close()
	e := newEnv(t, map[string]string{"stripe": up.URL}, func(o *proxy.Options) { o.AgentID = "legacy-billing" })
	ctx := context.Background()
	step, err := e.eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "hotel", EffectType: "hotel.book", AgentID: "alice-bot",
		GroupKey: "trip:alice", Compensation: &ledger.Compensation{EffectType: "hotel.cancel", Payload: json.RawMessage(`{"res":"H1"}`)}})
	if err != nil {
		t.Fatalf("err != nil: alice's step: %+v %v", step, err)
	}
	if step.Decision != ledger.DecisionExecute {
		t.Fatalf("step.Decision != ledger.DecisionExecute: alice's step: %+v %v", step, err)
	}
	if _, err := e.eng.Report(ctx, ledger.ReportRequest{EffectID: step.EffectID, Outcome: ledger.OutcomeSucceeded}); err != nil {
		t.Fatal(err)
	}
	resp := post(t, e.url+"/stripe/v1/payment_intents", "amount=100&currency=usd&customer=cus_1", map[string]string{
		"Ratchet-Idempotency-Key": "p:1", "Ratchet-Group-Key": "trip:alice", "Content-Type": "application/x-www-form-urlencoded"})
	body := readAll(t, resp)
	if resp.StatusCode != 403 {
		t.Errorf("resp.StatusCode != 403: answer %d %s, want 403 ratchet_unauthorized", resp.StatusCode, body)
	} else if !strings.Contains(body, "ratchet_unauthorized") {
		t.Errorf("!strings.Contains(body, \"ratchet_unauthorized\"): answer %d %s, want 403 ratchet_unauthorized", resp.StatusCode, body)
	}
	if hits.Load() != 0 {
		t.Errorf("the vendor got %d requests", hits.Load())
	}
	if _, err := e.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "trip:alice", AgentID: "alice-bot"}); err != nil {
		t.Errorf("alice's unwind: %v", err)
	}
}
