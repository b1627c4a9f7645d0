package admin_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// With agents configured and no admins, the (loopback) admin API is
// closed: nobody on the host (an agent) can grant or revoke.
func TestAClosedAdminAPIRefusesGrants(t *testing.T) {
	eng := enginetest.Open(t, t.TempDir(), ledger.Options{})
	srv := httptest.NewServer(admin.Handler(eng, &admin.Options{Agents: map[string]bool{sum("agent-tok"): true}}))
	defer srv.Close()
	ctx := context.Background()
	var ae *admin.Error
	for _, tok := range []string{"", "agent-tok", "whatever"} {
		c := &admin.Client{URL: srv.URL, Token: tok}
		if _, err := c.CreateGrant(ctx, admin.GrantBody{Namespace: "default", EffectType: "*", AgentID: "bot", MaxEffects: i64(9), TTL: "1h"}); !errors.As(err, &ae) || ae.Status/100 != 4 {
			t.Fatalf("token %q created a grant on a closed API: %v", tok, err)
		}
		if _, err := c.CreateGrant(ctx, admin.GrantBody{Namespace: "default", EffectType: "*", AgentID: "bot", MaxEffects: i64(9), TTL: "100000h"}); err == nil {
			t.Fatalf("long grant")
		}
	}
	if gs, _ := eng.ListGrants(ctx, "", true); len(gs) != 0 {
		t.Fatalf("grants: %+v", gs)
	}
}
