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

	stripe "github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/pgtest"
	"github.com/ratchet-mcp/ratchet/internal/stripemock"
	"github.com/ratchet-mcp/ratchet/ledger"
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
// token-fixed agent "trusted-bot", the identity policy and extra config,
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
		"  agents: [{token_sha256: '" + sha("bot-tok") + "', namespace: default, agent_id: trusted-bot}]\n" +
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
				page, err := ops.Effects(ctx, ledger.Filter{Namespace: "default", Limit: 500})
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
	page, err := ops.Effects(ctx, ledger.Filter{Namespace: "default", State: ledger.StateSucceeded})
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
