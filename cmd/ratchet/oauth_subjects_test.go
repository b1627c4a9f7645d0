package main

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/jwtauth/jwtauthtest"
	"github.com/ratchet-mcp/ratchet/internal/pgtest"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/mcp"
)

// TestAnIssuerOfSubjectsOnlyLetsNoOtherSubjectActThroughServe: an issuer
// whose agents are listed one by one (subjects, no namespace or
// namespace_claim) admits those; a token of any other of its subjects
// with the agent scope is refused at /mcp (401 invalid_token), on both
// backends, and nothing it tried is recorded in any namespace (it used to
// begin effects in the default namespace under its sub).
func TestAnIssuerOfSubjectsOnlyLetsNoOtherSubjectActThroughServe(t *testing.T) {
	for _, backend := range []string{"badger", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			is := jwtauthtest.New(t)
			cfg := "auth:\n  oauth:\n    resource: " + oauthResource + "\n    issuers:\n" +
				"      - name: corp\n        issuer: '" + is.URL + "'\n        discovery_url: '" + is.DiscoveryURL() + "'\n        algorithms: [RS256]\n" +
				"        subjects:\n          - {subject: client-7, namespace: shop, agent_id: checkout-bot}\n"
			if backend == "postgres" {
				dsn := pgtest.DSN(t)
				t.Setenv("RATCHET_PG_DSN", dsn)
				cfg += "ledger: {backend: postgres, dsn_env: RATCHET_PG_DSN, schema: " + pgtest.Schema(t, dsn, "oauthsub_") + "}\n"
			}
			s := startServe(t, filepath.Join(t.TempDir(), "data"), cfg)
			ctx := context.Background()

			listed := connect(t, s.mcp, is.Sign(t, is.Std("client-7", oauthResource, "ratchet:agent")))
			if got := callTool(t, listed, "ratchet_begin_effect", map[string]any{"idempotency_key": "mail:1", "effect_type": "email.send"}); got["decision"] != "execute" {
				t.Fatalf("the listed subject's begin: %v", got)
			}
			stranger := is.Sign(t, is.Std("stranger", oauthResource, "ratchet:agent"))
			if cs, err := mcp.Connect(ctx, s.mcp, stranger, "test"); err == nil {
				t.Errorf("a stranger's token opened a session")
				res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: map[string]any{"idempotency_key": "mail:2", "effect_type": "email.send"}})
				t.Logf("its begin: %v %v", res, err)
				cs.Close()
			}
			got := postMCP(t, s, stranger)
			if diff := cmp.Diff(mcpRefusal{Status: 401, Challenge: "invalid_token", Meta: true, RPCCode: -32001}, mcpRefusal{Status: got.Status, Challenge: got.Challenge, Meta: got.Meta, RPCCode: got.RPCCode}); diff != "" {
				t.Errorf("a stranger's token (-want +got):\n%s", diff)
			}
			if !strings.Contains(got.Message, "not one of issuer corp's subjects") {
				t.Errorf("the refusal %q does not say the subject is not listed", got.Message)
			}

			ops := &admin.Client{URL: s.admin, Token: is.Sign(t, is.Std("alice", oauthResource, "ratchet:admin"))}
			var keys []string
			for _, ns := range []string{"shop", "default"} {
				page, err := ops.Effects(ctx, admin.EffectFilter{Filter: ledger.Filter{Namespace: ns}})
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range page.Effects {
					keys = append(keys, e.Namespace+"/"+e.AgentID+"/"+e.IdempotencyKey)
				}
			}
			if diff := cmp.Diff([]string{"shop/checkout-bot/mail:1"}, keys); diff != "" {
				t.Errorf("effects recorded (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAnAccessTokenInTheQueryStringIsNotAccepted: RFC 9700 and the MCP
// authorization spec: a token goes in the Authorization header only; one
// in the URL (access_token=, as RFC 6750 once allowed) is as no token, 401.
func TestAnAccessTokenInTheQueryStringIsNotAccepted(t *testing.T) {
	is := jwtauthtest.New(t)
	s := oauthServe(t, "badger", is)
	tok := is.Sign(t, agentClaims(is, "bot-1", "payments"))
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	req, _ := http.NewRequest(http.MethodPost, s.mcp+"?access_token="+tok, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("status %d, want 401", resp.StatusCode)
	}
}
