package console_test

import (
	"net/http/httptest"
	"testing"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/console"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestExplainThroughTheConsole: the Explain page's form posts to the admin
// API's POST /v1/explain through the console, with the session's CSRF
// token, and gets the engine's answer, recording nothing, open on loopback
// and signed in with an admin token; without the CSRF token the post is
// refused.
func TestExplainThroughTheConsole(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts console.Options
	}{{"open", console.Options{}}, {"signed in", console.Options{Admins: admins, Agents: agents}}} {
		t.Run(mode.name, func(t *testing.T) {
			eng := newEngine(t)
			api := admin.Handler(eng, &admin.Options{Admins: mode.opts.Admins, Agents: mode.opts.Agents, Explainer: eng})
			srv := httptest.NewServer(console.Handler(api, eng, &mode.opts))
			t.Cleanup(srv.Close)
			b := newBrowser(t, srv)
			if mode.opts.Admins == nil {
				b.open()
			} else if _, code := b.signIn("admin-tok"); code != "" {
				t.Fatalf("sign in: %s", code)
			}
			body := map[string]any{"begin": map[string]any{"idempotency_key": "o-1", "effect_type": "payment.charge", "estimated_cost_micros": 5_000_000}}
			if _, code := b.do("POST", "/console/api/v1/explain", body, nil, nil); code != console.CodeCSRFRequired {
				t.Fatalf("without CSRF: %q, want %s", code, console.CodeCSRFRequired)
			}
			var ans admin.ExplainAnswer
			if code := b.post("/console/api/v1/explain", body, &ans); code != "" {
				t.Fatalf("explain: %s", code)
			}
			if ans.Explanation == nil || ans.Decision == nil || ans.Decision.Decision != ledger.DecisionApprovalRequired {
				t.Fatalf("explained %+v, want approval_required (threshold $1)", ans.Explanation)
			}
			if len(ans.Ceilings) != 1 || ans.Ceilings[0].Name != "spend" {
				t.Errorf("ceilings %+v, want spend", ans.Ceilings)
			}
			if list, err := eng.ListApprovals(t.Context(), "", ""); err != nil || len(list) != 0 {
				t.Errorf("explaining recorded approvals %+v (%v)", list, err)
			}
		})
	}
}
