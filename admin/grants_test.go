package admin_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

func TestGrantsThroughTheAdminAPI(t *testing.T) {
	eng, url := setup(t)
	ctx := context.Background()
	c := &admin.Client{URL: url, Token: "admin-tok"}
	g, err := c.CreateGrant(ctx, admin.GrantBody{Namespace: "default", EffectType: "payment.*", AgentID: "bot", MaxEffects: i64(1), TTL: "1h", Note: "batch refunds"})
	if err != nil || g.GrantID == "" || g.CreatedBy != "admin:alice" || g.State != ledger.GrantActive || time.Until(g.ExpiresAt) < 59*time.Minute {
		t.Fatalf("create: %+v %v", g, err)
	}
	res, _ := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "p1", EffectType: "payment.charge", AgentID: "bot", EstimatedCostMicros: i64(500)})
	if res.Decision != ledger.DecisionExecute || res.GrantID != g.GrantID {
		t.Fatalf("begin inside the grant: %+v", res)
	}
	if list, err := c.Grants(ctx, "", false); err != nil || len(list) != 0 {
		t.Fatalf("live grants after its one effect: %+v %v", list, err) // exhausted
	}
	r, err := c.RevokeGrant(ctx, g.GrantID)
	if err != nil || r.State != ledger.GrantRevoked || r.RevokedBy != "admin:alice" {
		t.Fatalf("revoke: %+v %v", r, err)
	}
	if list, err := c.Grants(ctx, "default", true); err != nil || len(list) != 1 || list[0].UsedEffects != 1 {
		t.Fatalf("all grants: %+v %v", list, err)
	}
	var ae *admin.Error
	for name, body := range map[string]admin.GrantBody{
		"no end":   {Namespace: "default", EffectType: "payment.*", AgentID: "bot", MaxEffects: i64(1)},
		"bad ttl":  {Namespace: "default", EffectType: "payment.*", AgentID: "bot", MaxEffects: i64(1), TTL: "soon"},
		"no bound": {Namespace: "default", EffectType: "payment.*", AgentID: "bot", TTL: "1h"},
	} {
		if _, err := c.CreateGrant(ctx, body); !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "invalid_argument" {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, err := c.RevokeGrant(ctx, "grt_missing"); !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "grant_not_found" {
		t.Fatalf("revoke a missing grant: %v", err)
	}
	// An agent's token cannot grant itself anything.
	agent := &admin.Client{URL: url, Token: "agent-tok"}
	if _, err := agent.CreateGrant(ctx, admin.GrantBody{Namespace: "default", EffectType: "*", AgentID: "bot", MaxEffects: i64(9), TTL: "1h"}); !errors.As(err, &ae) || ae.Status != 403 {
		t.Fatalf("an agent's grant: %v", err)
	}
}

func TestDeadLettersThroughTheAdminAPI(t *testing.T) {
	dir := t.TempDir()
	eng := enginetest.Open(t, dir, ledger.Options{Policies: []ledger.Rule{{Match: "payment.*", ApprovalThresholdMicros: i64(100)}},
		Route: func(ledger.Event) []string { return []string{"hook"} }})
	srv := httptest.NewServer(admin.Handler(eng, &admin.Options{Admins: map[string]string{sum("admin-tok"): "alice"}}))
	defer srv.Close()
	ctx := context.Background()
	c := &admin.Client{URL: srv.URL, Token: "admin-tok"}
	for _, k := range []string{"p1", "p2"} {
		eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: k, EffectType: "payment.charge", EstimatedCostMicros: i64(500)})
	}
	es, _ := eng.ClaimEvents(ctx, "w", time.Minute, 1)
	if err := eng.EventFailed(ctx, "hook", es[0].Event.ID, "410 gone", time.Now(), true); err != nil {
		t.Fatal(err)
	}
	all, err := c.Outbox(ctx, false)
	if err != nil || len(all) != 2 {
		t.Fatalf("outbox: %+v %v", all, err)
	}
	dead, err := c.Outbox(ctx, true)
	if err != nil || len(dead) != 1 || !dead[0].Dead || dead[0].LastError != "410 gone" || dead[0].Event.ID != es[0].Event.ID {
		t.Fatalf("dead letters: %+v %v", dead, err)
	}
}
