package proxy_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stripe/stripe-go/v79"

	"github.com/ratchet-mcp/ratchet/internal/stripemock"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/proxy"
)

// Request shapes as each vendor documents them (and as its official SDK
// sends them), with the caller's own idempotency key where the vendor takes
// it and the header or body field that says which merchant the call is for:
//   - Square CreatePayment: POST /v2/payments, body idempotency_key,
//     location_id (square/connect-api-specification, CreatePaymentRequest).
//   - Adyen Checkout: POST /v71/payments, headers X-API-Key and
//     Idempotency-Key, body merchantAccount
//     (docs.adyen.com/development-resources/api-idempotency).
//   - PayPal Orders v2: POST /v2/checkout/orders, headers PayPal-Request-Id,
//     PayPal-Auth-Assertion (developer.paypal.com/api/orders/v2/#orders_create,
//     developer.paypal.com/api/rest/requests/), an OAuth bearer token.
//   - Checkout.com: POST /payments, header Cko-Idempotency-Key, body
//     processing_channel_id, a secret key or an OAuth bearer token
//     (checkout.com/docs/payments/manage-payments/idempotency).
type shape struct {
	vendor, path string
	// request builds one request: the caller's key, the merchant it is for,
	// the credential it carries, and a note that changes the content.
	request func(key, merchant, credential, note string) (http.Header, string)
	// ok is the vendor's answer to a call that went through.
	ok string
	// conflict is the status of Ratchet's idempotency_key_conflict reply
	// and a string its body holds in the vendor's own error shape.
	conflictStatus int
	conflictCode   string
}

var shapes = []shape{
	{
		vendor: "square", path: "/v2/payments",
		request: func(key, merchant, credential, note string) (http.Header, string) {
			return http.Header{"Authorization": {"Bearer " + credential}, "Square-Version": {"2025-08-20"}},
				`{"idempotency_key":"` + key + `","source_id":"ccof:GaJGNaZa8x4OgDJn4GB","amount_money":{"amount":1000,"currency":"USD"},"location_id":"` + merchant + `","note":"` + note + `"}`
		},
		ok:             `{"payment":{"id":"R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY","status":"COMPLETED"}}`,
		conflictStatus: 400, conflictCode: `"code":"IDEMPOTENCY_KEY_REUSED"`,
	},
	{
		vendor: "adyen", path: "/v71/payments",
		request: func(key, merchant, credential, note string) (http.Header, string) {
			return http.Header{"X-Api-Key": {credential}, "Idempotency-Key": {key}},
				`{"amount":{"currency":"EUR","value":1000},"reference":"` + note + `","paymentMethod":{"type":"scheme"},"merchantAccount":"` + merchant + `"}`
		},
		ok:             `{"pspReference":"993617895204576J","resultCode":"Authorised"}`,
		conflictStatus: 422, conflictCode: `"errorCode":"ratchet_idempotency_key_conflict"`,
	},
	{
		vendor: "paypal", path: "/v2/checkout/orders",
		request: func(key, merchant, credential, note string) (http.Header, string) {
			return http.Header{"Authorization": {"Bearer " + credential}, "Paypal-Request-Id": {key}, "Paypal-Auth-Assertion": {merchant}},
				`{"intent":"CAPTURE","purchase_units":[{"reference_id":"` + note + `","amount":{"currency_code":"USD","value":"10.00"}}]}`
		},
		ok:             `{"id":"5O190127TN364715T","status":"CREATED"}`,
		conflictStatus: 422, conflictCode: `"issue":"PAYPAL_REQUEST_ID_PREVIOUSLY_USED"`,
	},
	{
		vendor: "checkout", path: "/payments",
		request: func(key, merchant, credential, note string) (http.Header, string) {
			return http.Header{"Authorization": {"Bearer " + credential}, "Cko-Idempotency-Key": {key}},
				`{"amount":1000,"currency":"USD","source":{"type":"token","token":"tok_4gzeau5o2uqubbk6fufs3m7p54"},"reference":"` + note + `","processing_channel_id":"` + merchant + `"}`
		},
		ok:             `{"id":"pay_mbabizu24mvu3mela5njyhpit4","approved":true,"status":"Authorized"}`,
		conflictStatus: 422, conflictCode: `"error_type":"request_invalid"`,
	},
}

// vendorFake answers like the vendor: ok, or 500 while failing is set. It
// counts the calls that reach it and keeps the idempotency keys it got.
type vendorFake struct {
	ok      string
	failing atomic.Bool
	hits    atomic.Int64
	mu      sync.Mutex
	keys    []string
}

func (f *vendorFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.hits.Add(1)
	b, _ := io.ReadAll(r.Body)
	var body struct {
		Key string `json:"idempotency_key"`
	}
	json.Unmarshal(b, &body)
	f.mu.Lock()
	f.keys = append(f.keys, body.Key+r.Header.Get("Idempotency-Key")+r.Header.Get("Paypal-Request-Id")+r.Header.Get("Cko-Idempotency-Key"))
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if f.failing.Load() {
		w.WriteHeader(500)
		io.WriteString(w, `{"message":"internal error"}`)
		return
	}
	w.WriteHeader(200)
	io.WriteString(w, f.ok)
}

func (s shape) send(t *testing.T, e *env, key, merchant, credential, note string) (*http.Response, string) {
	t.Helper()
	h, body := s.request(key, merchant, credential, note)
	req, _ := http.NewRequest(http.MethodPost, e.url+"/"+s.vendor+s.path, strings.NewReader(body))
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp, readAll(t, resp)
}

func forEachShape(t *testing.T, test func(t *testing.T, s shape, fake *vendorFake, e *env)) {
	for _, s := range shapes {
		t.Run(s.vendor, func(t *testing.T) {
			fake := &vendorFake{ok: s.ok}
			up := httptest.NewServer(fake)
			defer up.Close()
			test(t, s, fake, newEnvConfig(t, envConfig{}, map[string]string{s.vendor: up.URL}, nil))
		})
	}
}

// TestTheCallersKeyDecides: with the caller's own key in the vendor's
// place, the same key and content is one call, however often sent, and a
// new key is a new call even for identical content (a second purchase of
// the same thing must reach the vendor).
func TestTheCallersKeyDecides(t *testing.T) {
	forEachShape(t, func(t *testing.T, s shape, fake *vendorFake, e *env) {
		resp, body := s.send(t, e, "order-1001", "M1", "token-1", "n")
		if resp.StatusCode != 200 || resp.Header.Get("Ratchet-Decision") != "execute" {
			t.Fatalf("first: %d %s", resp.StatusCode, body)
		}
		resp, body = s.send(t, e, "order-1001", "M1", "token-1", "n")
		if resp.Header.Get("Ratchet-Replayed") != "true" || body != s.ok || fake.hits.Load() != 1 {
			t.Fatalf("same key: %d %s, %d calls", resp.StatusCode, body, fake.hits.Load())
		}
		resp, body = s.send(t, e, "order-1002", "M1", "token-1", "n")
		if resp.Header.Get("Ratchet-Decision") != "execute" || fake.hits.Load() != 2 {
			t.Fatalf("a new key for identical content: %d %s, %d calls", resp.StatusCode, body, fake.hits.Load())
		}
		// Ratchet's own key reached the vendor, a new one per call.
		if fake.keys[0] == "order-1001" || fake.keys[0] == fake.keys[1] {
			t.Fatalf("vendor keys %q", fake.keys)
		}
	})
}

// TestATokenRefreshKeepsABlockedRetryBlocked: the vendor failed with a
// 500 (outcome unknown, so the call is blocked); the retry comes from a new
// client with the same key and content but a fresh OAuth token (or another
// API credential of the same merchant): still blocked, the vendor is not
// called again.
func TestATokenRefreshKeepsABlockedRetryBlocked(t *testing.T) {
	forEachShape(t, func(t *testing.T, s shape, fake *vendorFake, e *env) {
		fake.failing.Store(true)
		resp, body := s.send(t, e, "order-1001", "M1", "token-before-refresh", "n")
		if resp.StatusCode != 500 {
			t.Fatalf("first: %d %s", resp.StatusCode, body)
		}
		fake.failing.Store(false)
		resp, body = s.send(t, e, "order-1001", "M1", "token-after-refresh", "n")
		if resp.Header.Get("Ratchet-Decision") != "blocked" || fake.hits.Load() != 1 {
			t.Fatalf("retry after the refresh: %d %s %s, %d calls", resp.StatusCode, resp.Header.Get("Ratchet-Decision"), body, fake.hits.Load())
		}
	})
}

// TestTheCallersKeyWithOtherContentIsAConflict: the same key with a
// changed body (after a 500) is refused as the vendor would refuse it, in
// its own error shape, and never sent.
func TestTheCallersKeyWithOtherContentIsAConflict(t *testing.T) {
	forEachShape(t, func(t *testing.T, s shape, fake *vendorFake, e *env) {
		fake.failing.Store(true)
		s.send(t, e, "order-1001", "M1", "token-1", "n")
		fake.failing.Store(false)
		resp, body := s.send(t, e, "order-1001", "M1", "token-1", "changed")
		if resp.StatusCode != s.conflictStatus || !strings.Contains(body, s.conflictCode) || fake.hits.Load() != 1 {
			t.Fatalf("changed content: %d %s, %d calls", resp.StatusCode, body, fake.hits.Load())
		}
	})
}

// TestTwoMerchantsNeverShareAResponse: identical requests with the same
// caller key for two merchants (Square's location, Adyen's merchant
// account, PayPal's auth assertion, Checkout.com's processing channel),
// sent by one platform with one credential, are two calls; neither gets the
// other's answer.
func TestTwoMerchantsNeverShareAResponse(t *testing.T) {
	forEachShape(t, func(t *testing.T, s shape, fake *vendorFake, e *env) {
		for i, m := range []string{"M1", "M2"} {
			resp, body := s.send(t, e, "order-1001", m, "platform-token", "n")
			if resp.Header.Get("Ratchet-Decision") != "execute" || fake.hits.Load() != int64(i+1) {
				t.Fatalf("merchant %s: %d %s %s, %d calls", m, resp.StatusCode, resp.Header.Get("Ratchet-Decision"), body, fake.hits.Load())
			}
		}
	})
}

// TestStripeAccountsNeverShareAResponse: stripe-go against stripe-mock,
// two identical PaymentIntent creates for two connected accounts, named
// by Stripe-Account or by Stripe-Context (which stripe-node recommends),
// with stripe-go's own random key or the caller's: four accounts, four
// calls to Stripe.
func TestStripeAccountsNeverShareAResponse(t *testing.T) {
	mock := stripemock.Start(t)
	hits := &counter{rt: http.DefaultTransport}
	e := newEnvConfig(t, envConfig{}, map[string]string{"stripe": mock}, func(o *proxy.Options) { o.Transport = hits })
	sc := stripeClient(e.url+"/stripe", &http.Client{})
	for _, callerKey := range []string{"", "order-1001"} {
		hits.n.Store(0)
		for _, h := range []string{"Stripe-Account", "Stripe-Context"} {
			for _, acct := range []string{"acct_1A", "acct_1B"} {
				p := &stripe.PaymentIntentParams{Amount: stripe.Int64(2000), Currency: stripe.String("usd")}
				p.Headers = http.Header{h: {acct}}
				if callerKey != "" {
					p.SetIdempotencyKey(callerKey + h)
				}
				pi, err := sc.PaymentIntents.New(p)
				if err != nil {
					t.Fatalf("%s %s: %v", h, acct, err)
				}
				if pi.LastResponse.Header.Get("Ratchet-Decision") != "execute" {
					t.Fatalf("caller key %q, %s %s: %s", callerKey, h, acct, pi.LastResponse.Header.Get("Ratchet-Decision"))
				}
			}
		}
		if hits.n.Load() != 4 {
			t.Fatalf("caller key %q: %d calls reached Stripe for four accounts", callerKey, hits.n.Load())
		}
	}
}

// TestStripeGoKeys: a key the caller set with SetIdempotencyKey is the
// call's key (a new one is a new call, the same one with other parameters
// a *stripe.IdempotencyError); the random key stripe-go mints for each call
// is not, and identical calls dedupe by content.
func TestStripeGoKeys(t *testing.T) {
	mock := stripemock.Start(t)
	hits := &counter{rt: http.DefaultTransport}
	e := newEnv(t, map[string]string{"stripe": mock}, func(o *proxy.Options) { o.Transport = hits })
	sc := stripeClient(e.url+"/stripe", &http.Client{})
	create := func(key string, amount int64) (*stripe.PaymentIntent, error) {
		p := &stripe.PaymentIntentParams{Amount: stripe.Int64(amount), Currency: stripe.String("usd"), Customer: stripe.String("cus_1")}
		if key != "" {
			p.SetIdempotencyKey(key)
		}
		return sc.PaymentIntents.New(p)
	}
	for i, c := range []struct {
		key      string
		amount   int64
		decision string
		hits     int64
	}{
		{"", 1000, "execute", 1},
		{"", 1000, "duplicate", 1},           // stripe-go's own random key: the content decides
		{"checkout-7", 1000, "execute", 2},   // the caller's key: a new call
		{"checkout-7", 1000, "duplicate", 2}, // ... once
		{"checkout-8", 1000, "execute", 3},
	} {
		pi, err := create(c.key, c.amount)
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if d := pi.LastResponse.Header.Get("Ratchet-Decision"); d != c.decision || hits.n.Load() != c.hits {
			t.Fatalf("call %d: %s, %d calls", i+1, d, hits.n.Load())
		}
	}
	_, err := create("checkout-7", 1001)
	var se *stripe.Error
	var ie *stripe.IdempotencyError
	if !errors.As(err, &se) || se.HTTPStatusCode != 400 || se.Type != stripe.ErrorTypeIdempotency || !errors.As(se.Err, &ie) ||
		!strings.Contains(se.Msg, "idempotency_key_conflict") {
		t.Fatalf("same key, other amount: %#v", err)
	}
}

// TestStripeGoStopsRetryingABlockedCall: a blocked answer carries
// Stripe-Should-Retry: false, so stripe-go with retries on asks once
// instead of three times, each refused.
func TestStripeGoStopsRetryingABlockedCall(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Stripe-Should-Retry", "false")
		w.WriteHeader(500)
		io.WriteString(w, `{"error":{"type":"api_error","message":"internal"}}`)
	}))
	defer up.Close()
	e := newEnv(t, map[string]string{"stripe": up.URL}, nil)
	asked := &counter{rt: http.DefaultTransport}
	cfg := &stripe.BackendConfig{HTTPClient: &http.Client{Transport: asked}, MaxNetworkRetries: stripe.Int64(2),
		URL: stripe.String(e.url + "/stripe"), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}}
	b := stripe.GetBackendWithConfig(stripe.APIBackend, cfg)
	p := &stripe.PaymentIntentParams{Amount: stripe.Int64(1000), Currency: stripe.String("usd")}
	p.SetIdempotencyKey("order-1")
	pi := &stripe.PaymentIntent{}
	b.Call(http.MethodPost, "/v1/payment_intents", "sk_test_123", p, pi) // the 500: unknown outcome
	asked.n.Store(0)
	err := b.Call(http.MethodPost, "/v1/payment_intents", "sk_test_123", p, pi)
	var se *stripe.Error
	if !errors.As(err, &se) || se.HTTPStatusCode != 409 || se.Code != "ratchet_blocked" || asked.n.Load() != 1 {
		t.Fatalf("blocked: %v, asked %d times", err, asked.n.Load())
	}
	if effs := e.effects(t); len(effs) != 1 || effs[0].State != ledger.StateIndeterminate {
		t.Fatalf("effects: %+v", effs)
	}
}

// TestTwoMerchantsNeverShareAResponseInForwardMode: PayPal's server SDK
// takes an environment, not a URL, so it comes through forward mode; the
// intercepted requests are keyed as in reverse mode.
func TestTwoMerchantsNeverShareAResponseInForwardMode(t *testing.T) {
	s := shapes[2]
	fake := &vendorFake{ok: s.ok}
	up := httptest.NewServer(fake)
	defer up.Close()
	e := newEnvConfig(t, envConfig{}, map[string]string{"paypal": up.URL}, nil)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.ca.PEM())
	proxyURL, _ := url.Parse(e.url)
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	send := func(merchant, token string) string {
		h, body := s.request("order-1001", merchant, token, "n")
		req, _ := http.NewRequest(http.MethodPost, "https://api-m.sandbox.paypal.com/v2/checkout/orders", strings.NewReader(body))
		req.Header = h
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		return resp.Header.Get("Ratchet-Decision")
	}
	if d1, d2 := send("M1", "platform-token"), send("M2", "platform-token"); d1 != "execute" || d2 != "execute" || fake.hits.Load() != 2 {
		t.Fatalf("two merchants: %s, %s, %d calls", d1, d2, fake.hits.Load())
	}
	// The first merchant's retry with a refreshed token is its own call again.
	if d := send("M1", "refreshed-token"); d != "duplicate" || fake.hits.Load() != 2 {
		t.Fatalf("retry: %s, %d calls", d, fake.hits.Load())
	}
}
