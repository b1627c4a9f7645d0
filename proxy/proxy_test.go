package proxy_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/proxy"
)

func i64(v int64) *int64 { return &v }

// env is a proxy in front of upstreams, on a real ledger.
type env struct {
	eng   *ledger.Engine
	proxy *proxy.Proxy
	url   string
	ca    *proxy.CA
}

func rules() []ledger.Rule {
	return []ledger.Rule{
		{Match: "stripe.payment_intents.*", Ceilings: []ledger.Ceiling{{Name: "stripe-spend", LimitMicros: i64(50_000_000), Window: "24h", Per: "global"}}},
		{Match: "square.payments.*", ApprovalThresholdMicros: i64(500_000_000)},
		{Match: "adyen.payments.refund", Deny: true},
		{Match: "adyen.payments.create", MaxLeaseSeconds: 3}, // below the proxy's 5 s timeout + 15 s
	}
}

func newEnv(t testing.TB, upstreams map[string]string, mod func(*proxy.Options)) *env {
	t.Helper()
	return newEnvConfig(t, envConfig{rules: rules()}, upstreams, mod)
}

// envConfig is what a test may change in the ledger under the proxy.
type envConfig struct {
	rules []ledger.Rule
	clock ledger.Clock // nil: the system clock
}

func newEnvConfig(t testing.TB, cfg envConfig, upstreams map[string]string, mod func(*proxy.Options)) *env {
	t.Helper()
	dir := t.TempDir()
	eng := enginetest.Open(t, dir, ledger.Options{Policies: cfg.rules, Clock: cfg.clock})
	ca, err := proxy.LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	opts := proxy.Options{Upstreams: upstreams, CA: ca, UpstreamTimeout: 5 * time.Second,
		CurrencyMicros: map[string]int64{"usd": 1_000_000, "eur": 1_080_000}}
	if mod != nil {
		mod(&opts)
	}
	p, err := proxy.New(eng, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return &env{eng: eng, proxy: p, url: srv.URL, ca: ca}
}

// counter counts the requests that reach an upstream.
type counter struct {
	n  atomic.Int64
	rt http.RoundTripper
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// outcome is what a test checks of an effect the proxy reported.
type outcome struct {
	State           ledger.State
	VendorReference string
}

func outcomes(effs []ledger.Effect) []outcome {
	var out []outcome
	for _, e := range effs {
		out = append(out, outcome{e.State, e.VendorReference})
	}
	return out
}

func (e *env) effects(t testing.TB) []ledger.Effect {
	t.Helper()
	page, err := e.eng.List(context.Background(), ledger.Filter{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	return page.Effects
}
