package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	stripe "github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/pgtest"
	"github.com/ratchet-mcp/ratchet/internal/stripemock"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/mcp"
)

// identityPolicy: Stripe calls over $100 need approval and hold their key
// for at most a second (so a slow vendor answer lapses the lease); charges
// are capped at $150 a day per agent and transfers at $150 per run;
// an agent with an unreported expiry is denied its e-mails.
const identityPolicy = `policies:
  - match: 'stripe.*'
    approval_threshold_micros: 100000000
    max_lease_seconds: 1
  - match: 'stripe.charges.*'
    ceilings: [{name: per-agent, limit_micros: 150000000, window: 24h, per: agent}]
  - match: 'stripe.transfers.*'
    ceilings: [{name: per-run, limit_micros: 150000000, window: 24h, per: run}]
  - match: 'email.*'
    max_unreported: 1
`

// identityServe starts "ratchet serve" on backend with an admin, a
// token-fixed agent "trusted-bot", a token "ns-tok" that fixes no agent
// (both in namespace default), the identity policy and extra config,
// its Stripe upstream stripe-mock behind a front that holds a request
// carrying X-Test-Slow for three seconds (a vendor that answers late).
func identityServe(t *testing.T, backend, extra string) *server {
	t.Helper()
	mock, _ := url.Parse(stripemock.Start(t))
	rp := httputil.NewSingleHostReverseProxy(mock)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test-Slow") != "" {
			time.Sleep(3 * time.Second)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	cfg := "auth:\n  admins: [{token_sha256: '" + sha("admin-tok") + "', name: ops}]\n" +
		"  agents: [{token_sha256: '" + sha("bot-tok") + "', namespace: default, agent_id: trusted-bot},\n" +
		"           {token_sha256: '" + sha("ns-tok") + "', namespace: default}]\n" +
		"proxy:\n  upstreams: {stripe: '" + front.URL + "'}\n" + extra + identityPolicy
	if backend == "postgres" {
		dsn := pgtest.DSN(t)
		t.Setenv("RATCHET_PG_DSN", dsn)
		cfg += "ledger: {backend: postgres, dsn_env: RATCHET_PG_DSN, schema: " + pgtest.Schema(t, dsn, "pxid_") + "}\n"
	}
	return startServe(t, filepath.Join(t.TempDir(), "data"), cfg)
}

// stripeVia is stripe-go with the proxy as its base URL (reverse mode).
func stripeVia(s *server) *client.API {
	cfg := &stripe.BackendConfig{URL: stripe.String(s.proxy + "/stripe"), MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}}
	b := stripe.GetBackendWithConfig(stripe.APIBackend, cfg)
	return client.New("sk_test_123", &stripe.Backends{API: b, Connect: b, Uploads: b})
}

// proxied is what the proxy answered one stripe-go call: its decision
// and reason headers, and the HTTP status of a refusal (0 on success).
type proxied struct {
	decision, reason string
	status           int
}

func paymentIntent(t *testing.T, sc *client.API, cents int64, headers map[string]string) proxied {
	t.Helper()
	p := &stripe.PaymentIntentParams{Amount: stripe.Int64(cents), Currency: stripe.String("usd")}
	return answer(t, func() (*stripe.APIResponse, error) {
		setHeaders(&p.Params, headers)
		pi, err := sc.PaymentIntents.New(p)
		if pi == nil {
			return nil, err
		}
		return pi.LastResponse, err
	})
}

func charge(t *testing.T, sc *client.API, cents int64, headers map[string]string) proxied {
	t.Helper()
	p := &stripe.ChargeParams{Amount: stripe.Int64(cents), Currency: stripe.String("usd"), Source: &stripe.PaymentSourceSourceParams{Token: stripe.String("tok_visa")}}
	return answer(t, func() (*stripe.APIResponse, error) {
		setHeaders(&p.Params, headers)
		ch, err := sc.Charges.New(p)
		if ch == nil {
			return nil, err
		}
		return ch.LastResponse, err
	})
}

func transfer(t *testing.T, sc *client.API, cents int64, headers map[string]string) proxied {
	t.Helper()
	p := &stripe.TransferParams{Amount: stripe.Int64(cents), Currency: stripe.String("usd"), Destination: stripe.String("acct_1032D82eZvKYlo2C")}
	return answer(t, func() (*stripe.APIResponse, error) {
		setHeaders(&p.Params, headers)
		tr, err := sc.Transfers.New(p)
		if tr == nil {
			return nil, err
		}
		return tr.LastResponse, err
	})
}

func setHeaders(p *stripe.Params, headers map[string]string) {
	p.Headers = http.Header{}
	for k, v := range headers {
		p.Headers.Set(k, v)
	}
}

func answer(t *testing.T, call func() (*stripe.APIResponse, error)) proxied {
	t.Helper()
	resp, err := call()
	var se *stripe.Error
	switch {
	case err == nil:
		return proxied{decision: resp.Header.Get("Ratchet-Decision"), reason: resp.Header.Get("Ratchet-Reason")}
	case errors.As(err, &se):
		got := proxied{status: se.HTTPStatusCode}
		if se.LastResponse != nil {
			got.decision, got.reason = se.LastResponse.Header.Get("Ratchet-Decision"), se.LastResponse.Header.Get("Ratchet-Reason")
		}
		return got
	}
	t.Fatalf("stripe-go: %v", err)
	return proxied{}
}

// TestProxyHeadersAreNotAnIdentity: the proxy is unauthenticated, so what
// a caller says in Ratchet-Agent-Id and Ratchet-Run-Id is a label, never
// whose call it is. Through the real proxy (stripe-go, a real "ratchet
// serve") with a grant the operator made through the admin API, on both
// backends: a header naming the granted agent borrows nothing from its
// grant; rotating the headers does not dodge per-agent or per-run
// ceilings; and proxied calls whose leases lapse never count against a
// token-fixed MCP agent's max_unreported. Each used to: the headers were
// the begin's agent and run.
func TestProxyHeadersAreNotAnIdentity(t *testing.T) {
	for _, backend := range []string{"badger", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			s := identityServe(t, backend, "")
			ctx := context.Background()
			ops := &admin.Client{URL: s.admin, Token: "admin-tok"}
			grant, err := ops.CreateGrant(ctx, admin.GrantBody{Namespace: "default", EffectType: "stripe.*", AgentID: "trusted-bot",
				MaxCostMicros: ptr(10_000_000_000), TTL: "1h", Note: "trusted-bot may spend up to $10,000"})
			if err != nil {
				t.Fatal(err)
			}
			sc := stripeVia(s)

			// A header naming the granted agent borrows nothing.
			if got := paymentIntent(t, sc, 50_000, nil); got.status != 403 || got.decision != "approval_required" {
				t.Fatalf("$500 without headers: %+v, want 403 approval_required", got)
			}
			if got := paymentIntent(t, sc, 60_000, map[string]string{"Ratchet-Agent-Id": "trusted-bot"}); got.status != 403 || got.decision != "approval_required" {
				t.Errorf("$600 with Ratchet-Agent-Id: trusted-bot: %+v, want 403 approval_required (the header borrowed the grant)", got)
			}
			if got := paymentIntent(t, sc, 60_000, map[string]string{"Ratchet-Run-Id": "trusted-run", "Ratchet-Agent-Id": "trusted-bot", "Ratchet-Idempotency-Key": "both"}); got.status != 403 {
				t.Errorf("$600 with both headers: %+v, want 403", got)
			}
			grants, err := ops.Grants(ctx, "default", true)
			if err != nil || len(grants) != 1 {
				t.Fatalf("grants: %v %v", grants, err)
			}
			if g := grants[0]; g.GrantID != grant.GrantID || g.UsedCostMicros != 0 || g.UsedEffects != 0 {
				t.Errorf("the grant was charged: used %d micros, %d effects", g.UsedCostMicros, g.UsedEffects)
			}

			// Rotating Ratchet-Agent-Id does not dodge a per-agent ceiling ($150).
			var decisions []string
			for _, agent := range []string{"a-1", "a-2", "a-3"} {
				decisions = append(decisions, charge(t, sc, 6_000, map[string]string{"Ratchet-Agent-Id": agent, "Ratchet-Idempotency-Key": "ch:" + agent}).decision)
			}
			if want := []string{"execute", "execute", "denied"}; !slices.Equal(decisions, want) {
				t.Errorf("$60 charges as agents a-1, a-2, a-3 against $150 per agent: %v, want %v", decisions, want)
			}
			// Nor does rotating Ratchet-Run-Id dodge a per-run one.
			decisions = nil
			for _, run := range []string{"r-1", "r-2", "r-3"} {
				decisions = append(decisions, transfer(t, sc, 6_000, map[string]string{"Ratchet-Run-Id": run, "Ratchet-Idempotency-Key": "tr:" + run}).decision)
			}
			if want := []string{"execute", "execute", "denied"}; !slices.Equal(decisions, want) {
				t.Errorf("$60 transfers in runs r-1, r-2, r-3 against $150 per run: %v, want %v", decisions, want)
			}

			// A proxied call naming trusted-bot whose lease lapses (the
			// vendor answers after 3 s, the lease is 1 s) is not
			// trusted-bot's unreported expiry.
			if got := paymentIntent(t, sc, 100, map[string]string{"Ratchet-Agent-Id": "trusted-bot", "X-Test-Slow": "1"}); got.decision != "execute" {
				t.Fatalf("the slow $1 call: %+v", got)
			}
			waitFor(t, 10*time.Second, "the slow call's lease to be expired by the reaper", func() bool {
				page, err := ops.Effects(ctx, admin.EffectFilter{Filter: ledger.Filter{Namespace: "default", Limit: 500}})
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range page.Effects {
					if e.EstimatedCostMicros != nil && *e.EstimatedCostMicros == 1_000_000 {
						return e.State == ledger.StateIndeterminate || e.State == ledger.StateSucceeded
					}
				}
				return false
			})
			bot := callTool(t, connect(t, s.mcp, "bot-tok"), "ratchet_begin_effect", map[string]any{
				"idempotency_key": "mail:1", "effect_type": "email.send"})
			if bot["decision"] != "execute" {
				t.Errorf("trusted-bot's own e-mail after a proxied call named it and lapsed: %v, want execute", bot)
			}
		})
	}
}

// TestProxyAgentIDIsTheProxysIdentity: proxy.agent_id is whose the
// proxied calls are. A grant the operator makes to that agent through the
// admin API covers them and is charged; the effect records that agent and
// no run whatever the headers say; the headers are in the decision's log
// line, as labels.
func TestProxyAgentIDIsTheProxysIdentity(t *testing.T) {
	s := identityServe(t, "badger", "  agent_id: legacy-billing\n")
	ctx := context.Background()
	ops := &admin.Client{URL: s.admin, Token: "admin-tok"}
	if _, err := ops.CreateGrant(ctx, admin.GrantBody{Namespace: "default", EffectType: "stripe.payment_intents.*", AgentID: "legacy-billing",
		MaxCostMicros: ptr(1_000_000_000), TTL: "1h"}); err != nil {
		t.Fatal(err)
	}
	sc := stripeVia(s)
	got := paymentIntent(t, sc, 60_000, map[string]string{"Ratchet-Agent-Id": "trusted-bot", "Ratchet-Run-Id": "run-9"})
	if got.decision != "execute" {
		t.Fatalf("$600 as legacy-billing, granted $1,000: %+v, want execute", got)
	}
	if got := paymentIntent(t, sc, 60_000, map[string]string{"Ratchet-Idempotency-Key": "second"}); got.status != 403 || got.decision != "approval_required" {
		t.Errorf("a second $600 past the $1,000 grant: %+v, want 403 approval_required", got)
	}
	grants, err := ops.Grants(ctx, "default", true)
	if err != nil || len(grants) != 1 {
		t.Fatalf("grants: %v %v", grants, err)
	}
	if g := grants[0]; g.UsedCostMicros != 600_000_000 || g.UsedEffects != 1 {
		t.Errorf("the grant counted %d micros, %d effects; want 600000000, 1", g.UsedCostMicros, g.UsedEffects)
	}
	page, err := ops.Effects(ctx, admin.EffectFilter{Filter: ledger.Filter{Namespace: "default", State: ledger.StateSucceeded}})
	if err != nil || len(page.Effects) != 1 {
		t.Fatalf("succeeded effects: %v %v", page, err)
	}
	if e := page.Effects[0]; e.AgentID != "legacy-billing" || e.RunID != "" {
		t.Errorf("the effect's agent %q and run %q; want legacy-billing and none", e.AgentID, e.RunID)
	}
	waitFor(t, 5*time.Second, "the decision's log line with its labels", func() bool {
		return strings.Contains(s.stderr.String(), "label_agent_id=trusted-bot label_run_id=run-9")
	})
}

// TestATokenThatFixesNoAgentCannotActAsACredentialsAgent: an MCP token
// that fixes no agent names its agent_id in each call, but not the agent a
// credential fixes: proxy.agent_id (whose grants cover the proxy's
// callers) or an agent another token fixes. Through a real "ratchet
// serve" with grants made through the admin API, on both backends, such a
// begin is unauthorized and no grant is charged; any other agent_id is
// still the caller's to name. It used to be taken as named: a token for
// namespace default alone spent the proxy's grant and trusted-bot's.
func TestATokenThatFixesNoAgentCannotActAsACredentialsAgent(t *testing.T) {
	for _, backend := range []string{"badger", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			s := identityServe(t, backend, "  agent_id: legacy-billing\n")
			ctx := context.Background()
			ops := &admin.Client{URL: s.admin, Token: "admin-tok"}
			for _, agent := range []string{"legacy-billing", "trusted-bot"} {
				if _, err := ops.CreateGrant(ctx, admin.GrantBody{Namespace: "default", EffectType: "stripe.*", AgentID: agent,
					MaxCostMicros: ptr(1_000_000_000), TTL: "1h"}); err != nil {
					t.Fatal(err)
				}
			}
			cs := connect(t, s.mcp, "ns-tok")
			for _, agent := range []string{"legacy-billing", "trusted-bot"} {
				res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: map[string]any{
					"idempotency_key": "claim:" + agent, "effect_type": "stripe.payment_intents.create", "vendor": "stripe",
					"estimated_cost_micros": 600_000_000, "agent_id": agent}})
				if err != nil {
					t.Fatal(err)
				}
				if got := mcp.ErrorOf(res); got == nil || got.Code != ledger.CodeUnauthorized {
					t.Errorf("ns-tok begins as %s: %v %+v, want unauthorized", agent, got, res.StructuredContent)
				}
			}
			grants, err := ops.Grants(ctx, "default", true)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range grants {
				if g.UsedCostMicros != 0 || g.UsedEffects != 0 {
					t.Errorf("%s's grant was charged %d micros, %d effects by a token that fixes no agent", g.AgentID, g.UsedCostMicros, g.UsedEffects)
				}
			}
			got := callTool(t, cs, "ratchet_begin_effect", map[string]any{"idempotency_key": "own", "effect_type": "stripe.payment_intents.create",
				"vendor": "stripe", "estimated_cost_micros": 600_000_000, "agent_id": "helper-7"})
			if got["decision"] != "approval_required" {
				t.Errorf("ns-tok begins as helper-7 (no grant): %v, want approval_required", got)
			}
		})
	}
}

// TestATokenThatFixesNoAgentCannotSettleACredentialsAttempts: a token
// that fixes no agent reports and resolves the attempts of agents it may
// name, but not those of an agent a credential fixes. Through a real
// "ratchet serve", on both backends: it cannot report token-fixed
// trusted-bot's executing e-mail failed, nor resolve as failed a proxied
// call whose lease lapsed while the vendor is still answering (which
// would free the key for a second charge); each is unauthorized and the
// effect is left as it was. Both used to be applied.
func TestATokenThatFixesNoAgentCannotSettleACredentialsAttempts(t *testing.T) {
	for _, backend := range []string{"badger", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			s := identityServe(t, backend, "  agent_id: legacy-billing\n")
			ctx := context.Background()
			ops := &admin.Client{URL: s.admin, Token: "admin-tok"}
			ns := connect(t, s.mcp, "ns-tok")
			mine := callTool(t, connect(t, s.mcp, "bot-tok"), "ratchet_begin_effect", map[string]any{"idempotency_key": "mail:own", "effect_type": "email.send"})
			res, err := ns.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_report_effect", Arguments: map[string]any{
				"effect_id": mine["effect_id"], "attempt": 1, "outcome": "failed"}})
			if err != nil {
				t.Fatal(err)
			}
			if got := mcp.ErrorOf(res); got == nil || got.Code != ledger.CodeUnauthorized {
				t.Errorf("ns-tok reports trusted-bot's attempt failed: %v, want unauthorized", got)
			}

			// A proxied $1 call the vendor answers after 3 s, its lease 1 s.
			done := make(chan proxied, 1)
			go func() { done <- paymentIntent(t, stripeVia(s), 100, map[string]string{"X-Test-Slow": "1"}) }()
			var id string
			waitFor(t, 10*time.Second, "the slow proxied call to be begun", func() bool {
				page, err := ops.Effects(ctx, admin.EffectFilter{Filter: ledger.Filter{Namespace: "default", AgentID: "legacy-billing"}})
				if err != nil || len(page.Effects) == 0 {
					return false
				}
				id = page.Effects[0].EffectID
				return true
			})
			time.Sleep(1500 * time.Millisecond) // past its lease, the vendor not yet answered
			res, err = ns.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_resolve_effect", Arguments: map[string]any{
				"effect_id": id, "attempt": 1, "resolution": "failed"}})
			if err != nil {
				t.Fatal(err)
			}
			if got := mcp.ErrorOf(res); got == nil || got.Code != ledger.CodeUnauthorized {
				t.Errorf("ns-tok resolves the proxied call failed while the vendor is answering: %v, want unauthorized", got)
			}
			if got := <-done; got.decision != "execute" {
				t.Fatalf("the slow call: %+v", got)
			}
			waitFor(t, 10*time.Second, "the proxy's late report to settle its call", func() bool {
				e, err := ops.Effect(ctx, id)
				return err == nil && e.State == ledger.StateSucceeded
			})
		})
	}
}
