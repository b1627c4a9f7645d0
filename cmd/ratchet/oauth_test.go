package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/jwtauth/jwtauthtest"
	"github.com/ratchet-mcp/ratchet/internal/pgtest"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/mcp"
)

// oauthResource is the resource (and audience) of the OAuth tests' serve.
const oauthResource = "https://ratchet.test/mcp"

// oauthServe runs "ratchet serve" with no static token at all: agents and
// admins are the access tokens of one test issuer (namespace from the
// tenant claim, agent from sub).
func oauthServe(t *testing.T, backend string, is *jwtauthtest.Issuer) *server {
	t.Helper()
	cfg := "auth:\n  oauth:\n    resource: " + oauthResource + "\n    issuers:\n" +
		"      - {name: corp, issuer: '" + is.URL + "', discovery_url: '" + is.DiscoveryURL() + "', namespace_claim: tenant, algorithms: [RS256]}\n"
	if backend == "postgres" {
		dsn := pgtest.DSN(t)
		t.Setenv("RATCHET_PG_DSN", dsn)
		cfg += "ledger: {backend: postgres, dsn_env: RATCHET_PG_DSN, schema: " + pgtest.Schema(t, dsn, "oauth_") + "}\n"
	}
	return startServe(t, filepath.Join(t.TempDir(), "data"), cfg)
}

func agentClaims(is *jwtauthtest.Issuer, sub, tenant string) jwtauthtest.Claims {
	c := is.Std(sub, oauthResource, "ratchet:agent")
	c["tenant"] = tenant
	return c
}

// mcpRefusal is what the MCP endpoint answered a request with a token.
type mcpRefusal struct {
	Status    int
	Challenge string // the error= of WWW-Authenticate
	Meta      bool   // WWW-Authenticate names the resource metadata
	RPCCode   int
	Message   string
}

// postMCP sends a tools/call of ratchet_begin_effect with token, as a
// stateless request (no session needed to reach a tool).
func postMCP(t *testing.T, s *server, token string) mcpRefusal {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ratchet_begin_effect","arguments":{"idempotency_key":"hostile","effect_type":"email.send"}}}`
	req, _ := http.NewRequest(http.MethodPost, s.mcp, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var rpc struct {
		ID    json.RawMessage `json:"id"`
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	json.Unmarshal(raw, &rpc)
	wa := resp.Header.Get("WWW-Authenticate")
	out := mcpRefusal{Status: resp.StatusCode, Meta: strings.Contains(wa, `resource_metadata="`), RPCCode: rpc.Error.Code, Message: rpc.Error.Message}
	if _, after, ok := strings.Cut(wa, `error="`); ok {
		out.Challenge, _, _ = strings.Cut(after, `"`)
	}
	return out
}

// TestHostileTokensAreRefusedByServeAndRecordNothing: through a real
// "ratchet serve" with auth.oauth and no static token, on both backends,
// each hostile access token is refused at the MCP endpoint with the status
// and challenge the MCP authorization spec gives (401 invalid_token, 403
// insufficient_scope), the resource metadata named and a JSON-RPC error
// saying what to fix; an agent's token replayed to the admin API is 403;
// a valid token of another namespace sees nothing of this one's; and the
// ledger holds only the one effect the good token began, whose audit
// record names the OAuth admin who granted it.
func TestHostileTokensAreRefusedByServeAndRecordNothing(t *testing.T) {
	for _, backend := range []string{"badger", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			is := jwtauthtest.New(t)
			other := jwtauthtest.New(t)
			s := oauthServe(t, backend, is)
			ctx := context.Background()

			// The good agent token works end to end.
			good := is.Sign(t, agentClaims(is, "bot-1", "payments"))
			cs := connect(t, s.mcp, good)
			got := callTool(t, cs, "ratchet_begin_effect", map[string]any{"idempotency_key": "mail:1", "effect_type": "email.send"})
			if got["decision"] != "execute" {
				t.Fatalf("good token's begin: %v", got)
			}

			now := time.Now()
			expired := agentClaims(is, "bot-1", "payments")
			expired["exp"] = now.Add(-10 * time.Minute).Unix()
			future := agentClaims(is, "bot-1", "payments")
			future["nbf"] = now.Add(10 * time.Minute).Unix()
			adminToken := is.Sign(t, is.Std("alice", oauthResource, "ratchet:admin"))
			const refusedMsg = "unauthorized: "
			cases := []struct {
				name      string
				token     string
				status    int
				challenge string
				inMessage string
			}{
				{"no token", "", 401, "", "no bearer token"},
				{"wrong audience", is.Sign(t, func() jwtauthtest.Claims {
					c := agentClaims(is, "bot-1", "payments")
					c["aud"] = "https://elsewhere.test/mcp"
					return c
				}()), 401, "invalid_token", "audience"},
				{"wrong issuer", other.Sign(t, func() jwtauthtest.Claims {
					c := other.Std("bot-1", oauthResource, "ratchet:agent")
					c["tenant"] = "payments"
					return c
				}()), 401, "invalid_token", "not one Ratchet trusts"},
				{"expired", is.Sign(t, expired), 401, "invalid_token", "expired"},
				{"not yet valid", is.Sign(t, future), 401, "invalid_token", "not valid before"},
				{"alg none", is.SignNone(agentClaims(is, "bot-1", "payments")), 401, "invalid_token", `"none"`},
				{"HS256 keyed with the public key", is.SignHS256WithPublicKey(agentClaims(is, "bot-1", "payments")), 401, "invalid_token", `"HS256"`},
				{"unknown kid", is.SignKID(t, agentClaims(is, "bot-1", "payments"), "rotated-away"), 401, "invalid_token", "has no key"},
				{"admin scope on the agent tools", adminToken, 403, "insufficient_scope", "admin's token cannot call the agent tools"},
				{"a static-looking token", "not-a-jwt", 401, "invalid_token", "neither an access token"},
			}
			fetches := is.Fetches()
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					got := postMCP(t, s, c.token)
					if got.Status != c.status {
						t.Errorf("status %d, want %d (%+v)", got.Status, c.status, got)
					}
					if got.Challenge != c.challenge {
						t.Errorf("WWW-Authenticate error=%q, want %q", got.Challenge, c.challenge)
					}
					if !got.Meta {
						t.Error("WWW-Authenticate does not name the resource metadata")
					}
					if !strings.Contains(got.Message, c.inMessage) {
						t.Errorf("JSON-RPC message %q does not say %q", got.Message, c.inMessage)
					}
					if c.status == 401 && !strings.HasPrefix(got.Message, refusedMsg) {
						t.Errorf("JSON-RPC message %q does not start %q", got.Message, refusedMsg)
					}
				})
			}
			if got := is.Fetches() - fetches; got != 1 {
				t.Errorf("key set fetches for the hostile tokens = %d, want 1 (the unknown kid's)", got)
			}

			// The admin API: the agent's token (replayed) is 403, the
			// admin's is served and recorded as corp:alice.
			_, err := (&admin.Client{URL: s.admin, Token: good}).Effects(ctx, admin.EffectFilter{Filter: ledger.Filter{Namespace: "payments"}})
			if e, ok := errors.AsType[*admin.Error](err); !ok || e.Status != http.StatusForbidden || !strings.Contains(e.Message, "agent's token cannot use the admin API") {
				t.Errorf("the agent's token on the admin API: %v, want 403 saying an agent's token cannot use it", err)
			}
			ops := &admin.Client{URL: s.admin, Token: adminToken}
			g, err := ops.CreateGrant(ctx, admin.GrantBody{Namespace: "payments", EffectType: "email.*", AgentID: "bot-1", MaxCostMicros: ptr(1_000_000), TTL: "1h"})
			if err != nil {
				t.Fatalf("the admin's token on the admin API: %v", err)
			}
			if g.CreatedBy != "admin:corp:alice" {
				t.Errorf("grant created by %q, want admin:corp:alice (issuer name and subject)", g.CreatedBy)
			}

			// Another namespace's valid token sees nothing of payments'.
			elsewhere := connect(t, s.mcp, is.Sign(t, agentClaims(is, "bot-1", "refunds")))
			res, err := elsewhere.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_get_effect", Arguments: map[string]any{"effect_id": got["effect_id"]}})
			if err != nil {
				t.Fatal(err)
			}
			if e := mcp.ErrorOf(res); e == nil || e.Code != ledger.CodeEffectNotFound {
				t.Errorf("refunds' token gets payments' effect: %v, want effect_not_found", e)
			}

			// Nothing but the good begin was recorded.
			var keys []string
			for _, ns := range []string{"payments", "refunds", "default"} {
				page, err := ops.Effects(ctx, admin.EffectFilter{Filter: ledger.Filter{Namespace: ns}})
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range page.Effects {
					keys = append(keys, e.Namespace+"/"+e.AgentID+"/"+e.IdempotencyKey)
				}
			}
			if diff := cmp.Diff([]string{"payments/bot-1/mail:1"}, keys); diff != "" {
				t.Errorf("effects recorded (-want +got):\n%s", diff)
			}
			var audit bytes.Buffer
			if err := ops.AuditExport(ctx, time.Time{}, time.Time{}, &audit); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(audit.String(), "hostile") {
				t.Errorf("the audit log holds a hostile call:\n%s", audit.String())
			}
			if !strings.Contains(audit.String(), `"actor":"admin:corp:alice"`) {
				t.Errorf("the audit log does not name the OAuth admin:\n%s", audit.String())
			}
			for _, leak := range []string{good, adminToken} {
				if strings.Contains(s.stderr.String(), leak) {
					t.Error("serve's log holds a token")
				}
			}
			resp, err := http.Get(s.admin + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			scrape, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, line := range []string{`ratchet_token_decisions_total{issuer="corp",result="expired"} 1`,
				`ratchet_token_decisions_total{issuer="unknown",result="issuer"} 1`, `ratchet_token_decisions_total{issuer="corp",result="unknown_kid"} 1`} {
				if !strings.Contains(string(scrape), line) {
					t.Errorf("/metrics lacks %s", line)
				}
			}
			if !strings.Contains(s.stderr.String(), "token refused") || !strings.Contains(s.stderr.String(), "reason=expired") {
				t.Errorf("serve's log does not say which tokens it refused and why:\n%s", s.stderr)
			}
		})
	}
}

// TestServePublishesProtectedResourceMetadata: RFC 9728's document at the
// path the resource gives and at the bare well-known path, naming the
// issuer and the scopes.
func TestServePublishesProtectedResourceMetadata(t *testing.T) {
	is := jwtauthtest.New(t)
	s := oauthServe(t, "badger", is)
	base := strings.TrimSuffix(s.mcp, "/mcp")
	for _, path := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
			ScopesSupported      []string `json:"scopes_supported"`
		}
		err = json.NewDecoder(resp.Body).Decode(&meta)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %v", path, resp.StatusCode, err)
		}
		want := struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
			ScopesSupported      []string `json:"scopes_supported"`
		}{oauthResource, []string{is.URL}, []string{"ratchet:agent", "ratchet:admin"}}
		if diff := cmp.Diff(want, meta); diff != "" {
			t.Errorf("%s (-want +got):\n%s", path, diff)
		}
	}
}

// TestAnOAuthOnlyServeLeavesNothingOpenOnLoopback: with auth.oauth and no
// static token at all, an agent on the sidecar's loopback that leaves its
// token off finds neither an open console (it is closed: access tokens do
// not sign in to it) nor an open admin API (401: an admin's token is
// needed). With no token configured the console had been open to every
// local process, approvals included.
func TestAnOAuthOnlyServeLeavesNothingOpenOnLoopback(t *testing.T) {
	is := jwtauthtest.New(t)
	s := oauthServe(t, "badger", is)
	resp, err := http.Get(s.admin + "/console/session")
	if err != nil {
		t.Fatal(err)
	}
	var view struct {
		Mode      string `json:"mode"`
		CanDecide bool   `json:"can_decide"`
	}
	err = json.NewDecoder(resp.Body).Decode(&view)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if view.Mode != "admin_required" || view.CanDecide {
		t.Errorf("console session %+v, want mode admin_required, cannot decide", view)
	}
	req, _ := http.NewRequest(http.MethodPost, s.admin+"/v1/approvals/apr_x/approve", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("an approval without a token: %d, want 401", resp.StatusCode)
	}
}
