package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/jwtauth/jwtauthtest"
	"github.com/ratchet-mcp/ratchet/internal/pgtest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestAnOAuthAgentsActsAreAuditedWithIssuerAndSubject: through a real
// "ratchet serve" with auth.oauth and a static agent token side by side,
// on both backends, every audit record of what the OAuth agent did (its
// begins, reports, resolve and unwind) names the token's issuer and
// subject as principal "corp:<sub>", while the static-token agent's
// records carry no principal at all (as before).
func TestAnOAuthAgentsActsAreAuditedWithIssuerAndSubject(t *testing.T) {
	for _, backend := range []string{"badger", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			is := jwtauthtest.New(t)
			cfg := "auth:\n  agents: [{token_sha256: '" + sha("static-tok") + "', namespace: payments, agent_id: static-bot}]\n" +
				"  oauth:\n    resource: " + oauthResource + "\n    issuers:\n" +
				"      - {name: corp, issuer: '" + is.URL + "', discovery_url: '" + is.DiscoveryURL() + "', namespace_claim: tenant, algorithms: [RS256]}\n"
			if backend == "postgres" {
				dsn := pgtest.DSN(t)
				t.Setenv("RATCHET_PG_DSN", dsn)
				cfg += "ledger: {backend: postgres, dsn_env: RATCHET_PG_DSN, schema: " + pgtest.Schema(t, dsn, "oaudit_") + "}\n"
			}
			s := startServe(t, filepath.Join(t.TempDir(), "data"), cfg)
			ctx := context.Background()

			cs := connect(t, s.mcp, is.Sign(t, agentClaims(is, "bot-7", "payments")))
			a := callTool(t, cs, "ratchet_begin_effect", map[string]any{"idempotency_key": "mail:1", "effect_type": "email.send", "group_key": "trip"})
			callTool(t, cs, "ratchet_report_effect", map[string]any{"effect_id": a["effect_id"], "outcome": "succeeded"})
			b := callTool(t, cs, "ratchet_begin_effect", map[string]any{"idempotency_key": "mail:2", "effect_type": "email.send"})
			callTool(t, cs, "ratchet_report_effect", map[string]any{"effect_id": b["effect_id"], "outcome": "unknown"})
			callTool(t, cs, "ratchet_resolve_effect", map[string]any{"effect_id": b["effect_id"], "resolution": "failed", "attempt": 1})
			callTool(t, cs, "ratchet_unwind_group", map[string]any{"group_key": "trip", "reason": "cancelled"})

			st := connect(t, s.mcp, "static-tok")
			c := callTool(t, st, "ratchet_begin_effect", map[string]any{"idempotency_key": "mail:3", "effect_type": "email.send"})
			callTool(t, st, "ratchet_report_effect", map[string]any{"effect_id": c["effect_id"], "outcome": "succeeded"})

			adminTok := is.Sign(t, is.Std("alice", oauthResource, "ratchet:admin"))
			var export bytes.Buffer
			if err := (&admin.Client{URL: s.admin, Token: adminTok}).AuditExport(ctx, time.Time{}, time.Time{}, &export); err != nil {
				t.Fatal(err)
			}
			type seen struct{ Agent, Type, Principal string }
			var got []seen
			sc := bufio.NewScanner(&export)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				var rec struct {
					Event struct {
						Namespace, Type, Principal string
						AgentID                    string `json:"agent_id"`
					} `json:"event"`
				}
				if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
					t.Fatalf("audit line %q: %v", sc.Text(), err)
				}
				if rec.Event.Namespace != "payments" {
					continue
				}
				got = append(got, seen{rec.Event.AgentID, rec.Event.Type, rec.Event.Principal})
				if rec.Event.AgentID == "static-bot" && bytes.Contains(sc.Bytes(), []byte(`"principal"`)) {
					t.Errorf("a static-token agent's record names a principal: %s", sc.Text())
				}
			}
			want := []seen{
				{"bot-7", ledger.EventEffectBegun, "corp:bot-7"},
				{"bot-7", ledger.EventEffectReported, "corp:bot-7"},
				{"bot-7", ledger.EventEffectBegun, "corp:bot-7"},
				{"bot-7", ledger.EventEffectReported, "corp:bot-7"},
				{"bot-7", ledger.EventEffectIndeterminate, "corp:bot-7"},
				{"bot-7", ledger.EventEffectDetermined, "corp:bot-7"},
				{"bot-7", ledger.EventEffectResolved, "corp:bot-7"},
				{"bot-7", ledger.EventGroupUnwind, "corp:bot-7"},
				{"static-bot", ledger.EventEffectBegun, ""},
				{"static-bot", ledger.EventEffectReported, ""},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("audit records of payments (-want +got):\n%s", diff)
			}
		})
	}
}
