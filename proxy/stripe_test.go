package proxy_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/ratchet-mcp/ratchet/internal/stripemock"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/proxy"
)

var uuidV8 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func stripeClient(baseURL string, hc *http.Client) *client.API {
	cfg := &stripe.BackendConfig{HTTPClient: hc, MaxNetworkRetries: stripe.Int64(0), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}}
	if baseURL != "" {
		cfg.URL = stripe.String(baseURL)
	}
	b := stripe.GetBackendWithConfig(stripe.APIBackend, cfg)
	return client.New("sk_test_123", &stripe.Backends{API: b, Connect: b, Uploads: b})
}

func TestStripeGoThroughReverseProxy(t *testing.T) {
	mock := stripemock.Start(t)
	hits := &counter{rt: http.DefaultTransport}
	e := newEnv(t, map[string]string{"stripe": mock}, func(o *proxy.Options) { o.Transport = hits })
	sc := stripeClient(e.url+"/stripe", &http.Client{})

	params := func(key string, amount int64) *stripe.PaymentIntentParams {
		p := &stripe.PaymentIntentParams{Amount: stripe.Int64(amount), Currency: stripe.String("usd"), Customer: stripe.String("cus_1")}
		p.SetIdempotencyKey("stripe-go-key")
		p.Headers = http.Header{"Ratchet-Idempotency-Key": {key}, "Ratchet-Run-Id": {"run-7"}}
		return p
	}
	pi, err := sc.PaymentIntents.New(params("order:1", 2000))
	if err != nil {
		t.Fatal(err)
	}
	h := pi.LastResponse.Header
	sent := h.Get("Ratchet-Vendor-Key")
	if h.Get("Ratchet-Decision") != "execute" {
		t.Fatalf("h.Get(\"Ratchet-Decision\") != \"execute\": execute headers: %v", h)
	}
	if h.Get("Ratchet-Effect-Id") == "" {
		t.Fatalf("h.Get(\"Ratchet-Effect-Id\") == \"\": execute headers: %v", h)
	}
	if !uuidV8.MatchString(sent) {
		t.Fatalf("!uuidV8.MatchString(sent): execute headers: %v", h)
	}
	// stripe-mock echoes the Idempotency-Key it received: Ratchet's, not the caller's.
	if pi.LastResponse.IdempotencyKey != sent {
		t.Fatalf("stripe-mock received key %q, Ratchet shaped %q", pi.LastResponse.IdempotencyKey, sent)
	}
	again, err := sc.PaymentIntents.New(params("order:1", 2000))
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != pi.ID {
		t.Fatalf("again.ID != pi.ID: retry: id %s vs %s, replayed %q, upstream hits %d", again.ID, pi.ID, again.LastResponse.Header.Get("Ratchet-Replayed"), hits.n.Load())
	}
	if again.LastResponse.Header.Get("Ratchet-Replayed") != "true" {
		t.Fatalf("again.LastResponse.Header.Get(\"Ratchet-Replayed\") != \"true\": retry: id %s vs %s, replayed %q, upstream hits %d", again.ID, pi.ID, again.LastResponse.Header.Get("Ratchet-Replayed"), hits.n.Load())
	}
	if hits.n.Load() != 1 {
		t.Fatalf("hits.n.Load() != 1: retry: id %s vs %s, replayed %q, upstream hits %d", again.ID, pi.ID, again.LastResponse.Header.Get("Ratchet-Replayed"), hits.n.Load())
	}
	effs := e.effects(t)
	if len(effs) != 1 || effs[0].State != ledger.StateSucceeded || effs[0].VendorReference != pi.ID ||
		effs[0].EffectType != "payment.charge" || effs[0].Operation != "stripe.payment_intents.create" || *effs[0].EstimatedCostMicros != 20_000_000 || effs[0].RunID != "" { // Ratchet-Run-Id is a label, not the run
		t.Fatalf("ledger: %+v", effs)
	}
	// Same key, other content: a conflict, as a readable stripe error.
	_, err = sc.PaymentIntents.New(params("order:1", 2001))
	wantStripeError(t, "conflict", err, 400, "idempotency_key_conflict")
	// The ceiling (50 USD) refuses a 40 USD payment after 20 USD: stripe-go
	// surfaces it as a *stripe.Error with a readable message.
	_, err = sc.PaymentIntents.New(params("order:2", 4000))
	se := wantStripeError(t, "ceiling refusal", err, 403, "budget_exceeded")
	if !strings.Contains(se.Msg, "stripe-spend") {
		t.Fatalf("!strings.Contains(se.Msg, \"stripe-spend\"): ceiling refusal: %#v", err)
	}
	if se.Code != "ratchet_denied" {
		t.Fatalf("se.Code != \"ratchet_denied\": ceiling refusal: %#v", err)
	}
	if hits.n.Load() != 1 {
		t.Fatalf("refusals reached stripe: %d hits", hits.n.Load())
	}
	// Reads pass through untouched.
	got, err := sc.PaymentIntents.Get(pi.ID, nil)
	if err != nil {
		t.Fatalf("err != nil: read: %v %v hits %d", err, got, hits.n.Load())
	}
	if got.LastResponse.Header.Get("Ratchet-Decision") != "" {
		t.Fatalf("got.LastResponse.Header.Get(\"Ratchet-Decision\") != \"\": read: %v %v hits %d", err, got, hits.n.Load())
	}
	if hits.n.Load() != 2 {
		t.Fatalf("hits.n.Load() != 2: read: %v %v hits %d", err, got, hits.n.Load())
	}
}

func TestStripeGoThroughForwardProxy(t *testing.T) {
	mock := stripemock.Start(t)
	e := newEnv(t, map[string]string{"stripe": mock}, nil)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.ca.PEM())
	proxyURL, _ := url.Parse(e.url)
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: pool}}}

	// The default Stripe URL, https://api.stripe.com, intercepted.
	sc := stripeClient("", hc)
	p := &stripe.PaymentIntentParams{Amount: stripe.Int64(1000), Currency: stripe.String("usd")}
	p.Headers = http.Header{"Ratchet-Idempotency-Key": {"fwd:1"}}
	pi, err := sc.PaymentIntents.New(p)
	if err != nil {
		t.Fatal(err)
	}
	if pi.LastResponse.Header.Get("Ratchet-Decision") != "execute" {
		t.Fatalf("pi.LastResponse.Header.Get(\"Ratchet-Decision\") != \"execute\": forward: %v", pi.LastResponse.Header)
	}
	if !strings.HasPrefix(pi.ID, "pi_") {
		t.Fatalf("!strings.HasPrefix(pi.ID, \"pi_\"): forward: %v", pi.LastResponse.Header)
	}
	again, err := sc.PaymentIntents.New(p)
	if err != nil {
		t.Fatalf("err != nil: forward retry: %v", err)
	}
	if again.LastResponse.Header.Get("Ratchet-Replayed") != "true" {
		t.Fatalf("again.LastResponse.Header.Get(\"Ratchet-Replayed\") != \"true\": forward retry: %v", err)
	}
	// Any other host is refused.
	resp, err := hc.Get("https://example.com/")
	if err == nil {
		resp.Body.Close()
		t.Fatal("CONNECT to a non-vendor host was allowed")
	}
	// A client that does not trust Ratchet's CA cannot be fooled into it.
	strict := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	if resp, err := strict.Get("https://api.stripe.com/v1/charges"); err == nil {
		resp.Body.Close()
		t.Fatal("a client without the CA accepted the interception")
	}
}

// wantStripeError checks that stripe-go surfaced err as a *stripe.Error
// with status and a message naming code.
func wantStripeError(t *testing.T, what string, err error, status int, code string) *stripe.Error {
	t.Helper()
	var se *stripe.Error
	if !errors.As(err, &se) {
		t.Fatalf("%s: not a *stripe.Error: %#v", what, err)
	}
	if se.HTTPStatusCode != status {
		t.Fatalf("%s: HTTP %d, want %d: %v", what, se.HTTPStatusCode, status, err)
	}
	if !strings.Contains(se.Msg, code) {
		t.Fatalf("%s: message %q does not name %s", what, se.Msg, code)
	}
	return se
}
