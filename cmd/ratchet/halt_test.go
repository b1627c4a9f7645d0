package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/internal/pgtest"
	"github.com/ratchet-mcp/ratchet/internal/webtest"
)

// TestAHaltThroughOneProcessRefusesABeginOnAnother: two "ratchet serve"
// processes on one PostgreSQL ledger. The operator halts payments with
// "ratchet halt" against process A's admin API; the agent's next begin on
// process B is denied with reason halted and the note. The agent's token
// cannot lift the halt; /readyz stays green and the metric counts it;
// "ratchet halts" lists it; "ratchet resume" lifts it, and the next begin
// on B executes.
func TestAHaltThroughOneProcessRefusesABeginOnAnother(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "halt_")
	t.Setenv("RATCHET_PG_DSN", dsn)
	shared := t.TempDir()
	extra := "ledger: {backend: postgres, dsn_env: RATCHET_PG_DSN, schema: " + schema + "}\n" +
		"secrets: {hmac_key_file: '" + filepath.Join(shared, "hmac.key") + "'}\n" +
		"auth:\n  agents: [{token_sha256: '" + sha("agent-tok") + "', namespace: default, agent_id: bot}]\n" +
		"  admins: [{token_sha256: '" + sha("admin-tok") + "', name: alice}]\n"
	a := startServe(t, filepath.Join(t.TempDir(), "a"), extra)
	b := startServe(t, filepath.Join(t.TempDir(), "b"), extra)
	agent := connect(t, b.mcp, "agent-tok")
	begin := func(key string) map[string]any {
		return callTool(t, agent, "ratchet_begin_effect", map[string]any{"idempotency_key": key, "effect_type": "payment.charge", "estimated_cost_micros": 1000})
	}
	if got := begin("before"); got["decision"] != "execute" {
		t.Fatalf("before the halt: %v", got)
	}

	code, out, errs := cli(t, "admin-tok", nil, "halt", "--admin", a.admin, "--effect-type", "payment.*", "--note", "chargeback spike", "-o", "json")
	if code != 0 {
		t.Fatalf("ratchet halt: exit %d: %s", code, errs)
	}
	var h struct {
		HaltID    string `json:"halt_id"`
		CreatedBy string `json:"created_by"`
	}
	if err := json.Unmarshal([]byte(out), &h); err != nil || h.HaltID == "" {
		t.Fatalf("ratchet halt printed %q (%v)", out, err)
	}
	if h.CreatedBy != "admin:alice" {
		t.Errorf("created_by %q, want admin:alice", h.CreatedBy)
	}
	got := begin("after")
	if got["decision"] != "denied" || got["reason"] != "halted" {
		t.Errorf("a begin on B after the halt on A: %v", got)
	}
	if msg, _ := got["message"].(string); !strings.Contains(msg, "chargeback spike") {
		t.Errorf("message %q lacks the note", msg)
	}
	// The agent cannot lift it, through either process.
	for _, s := range []*server{a, b} {
		status, code := webtest.Send(t, http.MethodPost, s.admin+"/v1/halts/"+h.HaltID+"/lift", `{}`,
			map[string]string{"Content-Type": "application/json", "Authorization": "Bearer agent-tok"})
		if status != http.StatusForbidden || code != "unauthorized" {
			t.Errorf("lift with the agent's token: %d %s", status, code)
		}
	}
	if code, _, _ := cli(t, "agent-tok", nil, "resume", "--admin", b.admin, h.HaltID); code == 0 {
		t.Errorf("ratchet resume with the agent's token succeeded")
	}
	resp, err := http.Get(b.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/readyz while halted: %d, want 200", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, b.admin+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer admin-tok")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "ratchet_halts_active 1") {
			t.Errorf("/metrics lacks ratchet_halts_active 1")
		}
	}
	if code, out, errs := cli(t, "admin-tok", nil, "halts", "--admin", b.admin); code != 0 || !strings.Contains(out, h.HaltID) || !strings.Contains(out, "chargeback spike") {
		t.Errorf("ratchet halts on B: exit %d %q %s", code, out, errs)
	}
	if code, out, errs := cli(t, "admin-tok", nil, "resume", "--admin", b.admin, h.HaltID); code != 0 || !strings.Contains(out, "lifted") {
		t.Fatalf("ratchet resume: exit %d %q %s", code, out, errs)
	}
	if got := begin("after"); got["decision"] != "execute" {
		t.Errorf("after the resume: %v", got)
	}
}
