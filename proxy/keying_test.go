package proxy_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	// staticKey: the credential is an API key, which is not refreshed and
	// scopes the call (another key is another caller); else an OAuth
	// bearer token, which is refreshed and does not.
	staticKey bool
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
		staticKey: true,
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
		if resp.StatusCode != 200 {
			t.Fatalf("resp.StatusCode != 200: first: %d %s", resp.StatusCode, body)
		}
		if resp.Header.Get("Ratchet-Decision") != "execute" {
			t.Fatalf("resp.Header.Get(\"Ratchet-Decision\") != \"execute\": first: %d %s", resp.StatusCode, body)
		}
		resp, body = s.send(t, e, "order-1001", "M1", "token-1", "n")
		if resp.Header.Get("Ratchet-Replayed") != "true" {
			t.Fatalf("resp.Header.Get(\"Ratchet-Replayed\") != \"true\": same key: %d %s, %d calls", resp.StatusCode, body, fake.hits.Load())
		}
		if body != s.ok {
			t.Fatalf("body != s.ok: same key: %d %s, %d calls", resp.StatusCode, body, fake.hits.Load())
		}
		if fake.hits.Load() != 1 {
			t.Fatalf("fake.hits.Load() != 1: same key: %d %s, %d calls", resp.StatusCode, body, fake.hits.Load())
		}
		resp, body = s.send(t, e, "order-1002", "M1", "token-1", "n")
		if resp.Header.Get("Ratchet-Decision") != "execute" {
			t.Fatalf("resp.Header.Get(\"Ratchet-Decision\") != \"execute\": a new key for identical content: %d %s, %d calls", resp.StatusCode, body, fake.hits.Load())
		}
		if fake.hits.Load() != 2 {
			t.Fatalf("fake.hits.Load() != 2: a new key for identical content: %d %s, %d calls", resp.StatusCode, body, fake.hits.Load())
		}
		// Ratchet's own key reached the vendor, a new one per call.
		if fake.keys[0] == "order-1001" {
			t.Fatalf("fake.keys[0] == \"order-1001\": vendor keys %q", fake.keys)
		}
		if fake.keys[0] == fake.keys[1] {
			t.Fatalf("fake.keys[0] == fake.keys[1]: vendor keys %q", fake.keys)
		}
	})
}

// TestATokenRefreshKeepsABlockedRetryBlocked: the vendor failed with a
// 500 (outcome unknown, so the call is blocked); the retry comes from a new
// client with the same key and content but a fresh OAuth token: still
// blocked, the vendor is not called again. (An API key is not refreshed:
// Adyen's retry comes with the same key; another key is another caller,
// TestAnotherCompanysStaticKeyGetsNoReplay.)
func TestATokenRefreshKeepsABlockedRetryBlocked(t *testing.T) {
	forEachShape(t, func(t *testing.T, s shape, fake *vendorFake, e *env) {
		before, after := "token-before-refresh", "token-after-refresh"
		if s.staticKey {
			after = before
		}
		fake.failing.Store(true)
		resp, body := s.send(t, e, "order-1001", "M1", before, "n")
		if resp.StatusCode != 500 {
			t.Fatalf("first: %d %s", resp.StatusCode, body)
		}
		fake.failing.Store(false)
		resp, body = s.send(t, e, "order-1001", "M1", after, "n")
		if resp.Header.Get("Ratchet-Decision") != "blocked" {
			t.Fatalf("resp.Header.Get(\"Ratchet-Decision\") != \"blocked\": retry after the refresh: %d %s %s, %d calls", resp.StatusCode, resp.Header.Get("Ratchet-Decision"), body, fake.hits.Load())
		}
		if fake.hits.Load() != 1 {
			t.Fatalf("fake.hits.Load() != 1: retry after the refresh: %d %s %s, %d calls", resp.StatusCode, resp.Header.Get("Ratchet-Decision"), body, fake.hits.Load())
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
		if resp.StatusCode != s.conflictStatus {
			t.Fatalf("resp.StatusCode != s.conflictStatus: changed content: %d %s, %d calls", resp.StatusCode, body, fake.hits.Load())
		}
		if !strings.Contains(body, s.conflictCode) {
			t.Fatalf("!strings.Contains(body, s.conflictCode): changed content: %d %s, %d calls", resp.StatusCode, body, fake.hits.Load())
		}
		if fake.hits.Load() != 1 {
			t.Fatalf("fake.hits.Load() != 1: changed content: %d %s, %d calls", resp.StatusCode, body, fake.hits.Load())
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
			if resp.Header.Get("Ratchet-Decision") != "execute" {
				t.Fatalf("resp.Header.Get(\"Ratchet-Decision\") != \"execute\": merchant %s: %d %s %s, %d calls", m, resp.StatusCode, resp.Header.Get("Ratchet-Decision"), body, fake.hits.Load())
			}
			if fake.hits.Load() != int64(i+1) {
				t.Fatalf("fake.hits.Load() != int64(i+1): merchant %s: %d %s %s, %d calls", m, resp.StatusCode, resp.Header.Get("Ratchet-Decision"), body, fake.hits.Load())
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
	if !errors.As(err, &se) {
		t.Fatalf("!errors.As(err, &se): same key, other amount: %#v", err)
	}
	if se.HTTPStatusCode != 400 {
		t.Fatalf("se.HTTPStatusCode != 400: same key, other amount: %#v", err)
	}
	if se.Type != stripe.ErrorTypeIdempotency {
		t.Fatalf("se.Type != stripe.ErrorTypeIdempotency: same key, other amount: %#v", err)
	}
	if !errors.As(se.Err, &ie) {
		t.Fatalf("!errors.As(se.Err, &ie): same key, other amount: %#v", err)
	}
	if !strings.Contains(se.Msg, "idempotency_key_conflict") {
		t.Fatalf("!strings.Contains(se.Msg, \"idempotency_key_conflict\"): same key, other amount: %#v", err)
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
	if !errors.As(err, &se) {
		t.Fatalf("!errors.As(err, &se): blocked: %v, asked %d times", err, asked.n.Load())
	}
	if se.HTTPStatusCode != 409 {
		t.Fatalf("se.HTTPStatusCode != 409: blocked: %v, asked %d times", err, asked.n.Load())
	}
	if se.Code != "ratchet_blocked" {
		t.Fatalf("se.Code != \"ratchet_blocked\": blocked: %v, asked %d times", err, asked.n.Load())
	}
	if asked.n.Load() != 1 {
		t.Fatalf("asked.n.Load() != 1: blocked: %v, asked %d times", err, asked.n.Load())
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

// tokenOnly are request shapes in which only an OAuth bearer token says
// whose call it is: a PayPal app acting for itself (no
// PayPal-Auth-Assertion), Checkout.com with an OAuth token and no
// processing_channel_id, Square with no location_id. key is the caller's
// key, or none.
var tokenOnly = []struct {
	vendor, path, ok string
	request          func(key, token string) (http.Header, string)
}{
	{"paypal", "/v2/checkout/orders", `{"id":"5O190127TN364715T","status":"CREATED"}`, func(key, token string) (http.Header, string) {
		h := http.Header{"Authorization": {"Bearer " + token}}
		if key != "" {
			h.Set("Paypal-Request-Id", key)
		}
		return h, `{"intent":"CAPTURE","purchase_units":[{"reference_id":"n","amount":{"currency_code":"USD","value":"10.00"}}]}`
	}},
	{"checkout", "/payments", `{"id":"pay_mbabizu24mvu3mela5njyhpit4","approved":true,"status":"Authorized"}`, func(key, token string) (http.Header, string) {
		h := http.Header{"Authorization": {"Bearer " + token}}
		if key != "" {
			h.Set("Cko-Idempotency-Key", key)
		}
		return h, `{"amount":1000,"currency":"USD","source":{"type":"token","token":"tok_4gzeau5o2uqubbk6fufs3m7p54"},"reference":"n"}`
	}},
	{"square", "/v2/payments", `{"payment":{"id":"R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY","status":"COMPLETED"}}`, func(key, token string) (http.Header, string) {
		return http.Header{"Authorization": {"Bearer " + token}},
			`{"idempotency_key":"` + key + `","source_id":"ccof:GaJGNaZa8x4OgDJn4GB","amount_money":{"amount":1000,"currency":"USD"}}`
	}},
}

// postThroughProxy starts a proxy whose vendor upstream answers 200 and
// counts its calls, posts body with h to path there, and returns the
// proxy, the upstream's count and the answer.
func postThroughProxy(t *testing.T, vendor, path, body string, h http.Header) (*env, *atomic.Int64, *http.Response, string) {
	t.Helper()
	up, hits := fixedAnswer(200, "application/json", []byte(`{"id":"x"}`))
	t.Cleanup(up.Close)
	e := newEnv(t, map[string]string{vendor: up.URL}, nil)
	resp, b := sendTo(t, e.url+"/"+vendor+path, body, h)
	return e, hits, resp, b
}

// sendTo posts body with h to the proxy and returns the answer.
func sendTo(t *testing.T, url, body string, h http.Header) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	for k, v := range h {
		req.Header[k] = v
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp, readAll(t, resp)
}

// TestAppsKnownOnlyByTheirTokenNeverShareAResponse: two apps (each its own
// OAuth token, nothing else saying whose call it is) send the same request
// with the same key of theirs, or none: the second reaches the vendor and
// never gets the first's answer; each app's own retry replays its own.
// (The second app got the first's order or payment, replayed.)
func TestAppsKnownOnlyByTheirTokenNeverShareAResponse(t *testing.T) {
	for _, s := range tokenOnly {
		for _, key := range []string{"order-1001", ""} {
			t.Run(s.vendor+"/key="+key, func(t *testing.T) {
				fake := &vendorFake{ok: s.ok}
				up := httptest.NewServer(fake)
				defer up.Close()
				e := newEnvConfig(t, envConfig{}, map[string]string{s.vendor: up.URL}, nil)
				send := func(token string) *http.Response {
					h, body := s.request(key, token)
					resp, _ := sendTo(t, e.url+"/"+s.vendor+s.path, body, h)
					return resp
				}
				for i, tok := range []string{"A21AAF-app-A", "A21AAG-app-B"} {
					if resp := send(tok); resp.Header.Get("Ratchet-Decision") != "execute" || fake.hits.Load() != int64(i+1) {
						t.Fatalf("app %d: %s replayed=%q, %d calls", i+1, resp.Header.Get("Ratchet-Decision"), resp.Header.Get("Ratchet-Replayed"), fake.hits.Load())
					}
				}
				for _, tok := range []string{"A21AAF-app-A", "A21AAG-app-B"} {
					if resp := send(tok); resp.Header.Get("Ratchet-Replayed") != "true" || fake.hits.Load() != 2 {
						t.Fatalf("%s again: %s, %d calls", tok, resp.Header.Get("Ratchet-Decision"), fake.hits.Load())
					}
				}
			})
		}
	}
}

// TestATokenRefreshKeepsABlockedCallBlockedWhenOnlyTheTokenSaysWhose: the
// token does not scope the key, so after a 500 (outcome unknown) the
// retry with a refreshed token is still blocked: the vendor is called
// once. (Square without location_id executed again, with a new
// idempotency_key, so Square could not dedupe it either.)
func TestATokenRefreshKeepsABlockedCallBlockedWhenOnlyTheTokenSaysWhose(t *testing.T) {
	for _, s := range tokenOnly {
		for _, key := range []string{"order-1001", ""} {
			t.Run(s.vendor+"/key="+key, func(t *testing.T) {
				fake := &vendorFake{ok: s.ok}
				up := httptest.NewServer(fake)
				defer up.Close()
				e := newEnvConfig(t, envConfig{}, map[string]string{s.vendor: up.URL}, nil)
				fake.failing.Store(true)
				h, body := s.request(key, "EAAAl-before-refresh")
				if resp, b := sendTo(t, e.url+"/"+s.vendor+s.path, body, h); resp.StatusCode != 500 {
					t.Fatalf("first: %d %s", resp.StatusCode, b)
				}
				fake.failing.Store(false)
				h, body = s.request(key, "EAAAl-after-refresh")
				resp, b := sendTo(t, e.url+"/"+s.vendor+s.path, body, h)
				if resp.Header.Get("Ratchet-Decision") != "blocked" {
					t.Fatalf("resp.Header.Get(\"Ratchet-Decision\") != \"blocked\": retry after the refresh: %s %s, %d calls", resp.Header.Get("Ratchet-Decision"), b, fake.hits.Load())
				}
				if fake.hits.Load() != 1 {
					t.Fatalf("fake.hits.Load() != 1: retry after the refresh: %s %s, %d calls", resp.Header.Get("Ratchet-Decision"), b, fake.hits.Load())
				}
			})
		}
	}
}

// TestAnotherCompanysStaticKeyGetsNoReplay: a static key (an Adyen API
// key, a Checkout.com secret key) scopes the call even when the body
// names the merchant: another company's key naming the same merchant
// account or processing channel, with the same caller key and content,
// reaches the vendor (which refuses it), never the first company's stored
// answer. The first company's own retry still replays.
func TestAnotherCompanysStaticKeyGetsNoReplay(t *testing.T) {
	cases := []struct {
		vendor, path, ok, body string
		header                 func(cred string) http.Header
	}{
		{"adyen", "/v71/payments", `{"pspReference":"993617895204576J","resultCode":"Authorised"}`,
			`{"amount":{"currency":"EUR","value":1000},"reference":"n","paymentMethod":{"type":"scheme"},"merchantAccount":"VictimECOM"}`,
			func(c string) http.Header { return http.Header{"X-Api-Key": {c}, "Idempotency-Key": {"order-1001"}} }},
		{"checkout", "/payments", `{"id":"pay_victim","approved":true}`,
			`{"amount":1000,"currency":"USD","source":{"type":"token","token":"tok_x"},"reference":"n","processing_channel_id":"pc_victim"}`,
			func(c string) http.Header {
				return http.Header{"Authorization": {"Bearer " + c}, "Cko-Idempotency-Key": {"order-1001"}}
			}},
	}
	for _, c := range cases {
		t.Run(c.vendor, func(t *testing.T) {
			fake := &vendorFake{ok: c.ok}
			up := httptest.NewServer(fake)
			defer up.Close()
			e := newEnvConfig(t, envConfig{}, map[string]string{c.vendor: up.URL}, nil)
			for i, cred := range []string{"sk_victim_company_key", "sk_attacker_company_key"} {
				resp, b := sendTo(t, e.url+"/"+c.vendor+c.path, c.body, c.header(cred))
				if resp.Header.Get("Ratchet-Decision") != "execute" {
					t.Fatalf("resp.Header.Get(\"Ratchet-Decision\") != \"execute\": credential %d (%s): %s replayed=%q %s", i+1, cred, resp.Header.Get("Ratchet-Decision"), resp.Header.Get("Ratchet-Replayed"), b)
				}
				if fake.hits.Load() != int64(i+1) {
					t.Fatalf("fake.hits.Load() != int64(i+1): credential %d (%s): %s replayed=%q %s", i+1, cred, resp.Header.Get("Ratchet-Decision"), resp.Header.Get("Ratchet-Replayed"), b)
				}
			}
			if resp, _ := sendTo(t, e.url+"/"+c.vendor+c.path, c.body, c.header("sk_victim_company_key")); resp.Header.Get("Ratchet-Replayed") != "true" {
				t.Fatalf("the victim's own retry: %s", resp.Header.Get("Ratchet-Decision"))
			}
		})
	}
}

// TestRatchetKeysAreScopedByWhoseCallItIs: Ratchet-Idempotency-Key is
// scoped as the caller's key is: the same Ratchet key and content from
// another Stripe API key, or from another PayPal app's token, is another
// call, never a replay of the first's answer; the same caller again
// replays.
func TestRatchetKeysAreScopedByWhoseCallItIs(t *testing.T) {
	cases := []struct {
		vendor, path, body, ctype, ok string
		creds                         []string
	}{
		{"stripe", "/v1/refunds", "charge=ch_1&amount=100", "application/x-www-form-urlencoded", `{"id":"re_1","object":"refund"}`,
			[]string{"Bearer sk_test_company_A", "Bearer sk_test_company_B"}},
		{"paypal", "/v2/checkout/orders", `{"intent":"CAPTURE","purchase_units":[{"amount":{"currency_code":"USD","value":"10.00"}}]}`,
			"application/json", `{"id":"5O190127TN364715T","status":"CREATED"}`, []string{"Bearer A21AA-app-A", "Bearer A21AA-app-B"}},
	}
	for _, c := range cases {
		t.Run(c.vendor, func(t *testing.T) {
			fake := &vendorFake{ok: c.ok}
			up := httptest.NewServer(fake)
			defer up.Close()
			e := newEnvConfig(t, envConfig{}, map[string]string{c.vendor: up.URL}, nil)
			send := func(cred string) *http.Response {
				resp, _ := sendTo(t, e.url+"/"+c.vendor+c.path, c.body,
					http.Header{"Authorization": {cred}, "Ratchet-Idempotency-Key": {"refund-77"}, "Content-Type": {c.ctype}})
				return resp
			}
			for i, cred := range c.creds {
				if resp := send(cred); resp.Header.Get("Ratchet-Decision") != "execute" || fake.hits.Load() != int64(i+1) {
					t.Fatalf("%s: %s replayed=%q, %d calls", cred, resp.Header.Get("Ratchet-Decision"), resp.Header.Get("Ratchet-Replayed"), fake.hits.Load())
				}
			}
			if resp := send(c.creds[0]); resp.Header.Get("Ratchet-Replayed") != "true" || fake.hits.Load() != 2 {
				t.Fatalf("the first caller again: %s, %d calls", resp.Header.Get("Ratchet-Decision"), fake.hits.Load())
			}
		})
	}
}

// TestAStripeGoKeyKeepsItsCallPastTheWindow: a key in stripe-go's shape
// (NewIdempotencyKey: the UnixNano it was minted at, "_", six characters),
// whether stripe-go minted it for one call or the application minted and
// kept it, keys by content in the window its mint time falls in: a retry
// of a blocked call with that key stays blocked however late it comes
// (it executed again once dedupe_window had passed), as with any other
// key of the caller's; and a new key minted for identical content within
// the window is still a duplicate.
func TestAStripeGoKeyKeepsItsCallPastTheWindow(t *testing.T) {
	const window = 300 * time.Millisecond
	minted := fmt.Sprintf("%d_Ab-_9z", time.Now().UnixNano())
	for _, key := range []string{"order-77", "1733000000123456789_Ab-_9z", minted} {
		t.Run(key, func(t *testing.T) {
			up, hits := fixedAnswer(500, "application/json", []byte(`{"error":{"type":"api_error"}}`))
			defer up.Close()
			e := newEnvConfig(t, envConfig{}, map[string]string{"stripe": up.URL}, func(o *proxy.Options) { o.DedupeWindow = window })
			h := http.Header{"Authorization": {"Bearer sk_test_123"}, "Content-Type": {"application/x-www-form-urlencoded"}, "Idempotency-Key": {key}}
			sendTo(t, e.url+"/stripe/v1/payment_intents", "amount=100&currency=usd", h)
			time.Sleep(2*window + 100*time.Millisecond) // the app restarts and retries
			resp, _ := sendTo(t, e.url+"/stripe/v1/payment_intents", "amount=100&currency=usd", h)
			if d := resp.Header.Get("Ratchet-Decision"); d != "blocked" || hits.Load() != 1 {
				t.Fatalf("retry with the key %q: %s, %d calls reached Stripe", key, d, hits.Load())
			}
		})
	}
	t.Run("a new stripe-go key within the window", func(t *testing.T) {
		up, hits := fixedAnswer(200, "application/json", []byte(`{"id":"pi_1","object":"payment_intent"}`))
		defer up.Close()
		e := newEnvConfig(t, envConfig{}, map[string]string{"stripe": up.URL}, nil)
		for i, want := range []string{"execute", "duplicate"} {
			h := http.Header{"Authorization": {"Bearer sk_test_123"}, "Content-Type": {"application/x-www-form-urlencoded"},
				"Idempotency-Key": {fmt.Sprintf("%d_Ab-_9%d", time.Now().UnixNano(), i)}}
			if resp, _ := sendTo(t, e.url+"/stripe/v1/payment_intents", "amount=100&currency=usd", h); resp.Header.Get("Ratchet-Decision") != want || hits.Load() != 1 {
				t.Fatalf("call %d: %s, %d calls", i+1, resp.Header.Get("Ratchet-Decision"), hits.Load())
			}
		}
	})
}

// TestAmbiguousRequestsAreRefused: a request Ratchet and the vendor could
// read two ways is answered 400 in the vendor's shape, never sent and
// never recorded: two Stripe-Account values (scoped by the first, both
// forwarded, so two requests naming different second accounts were one
// call); a JSON key twice (Adyen's merchantAccount A then B, and B alone,
// were one call); a repeated Stripe form amount (costed at the first,
// charged at the last: $60,000 under a $50 ceiling); an amount written in
// a form Ratchet does not read (a fraction or an exponent for minor units,
// a string, a currency that is not a code: uncounted, it passed every
// ceiling).
func TestAmbiguousRequestsAreRefused(t *testing.T) {
	cases := []struct {
		name, vendor, path, body, want string
		header                         http.Header
	}{
		{"two Stripe-Account values", "stripe", "/v1/payment_intents", "amount=100&currency=usd", `"type":"invalid_request_error"`,
			http.Header{"Authorization": {"Bearer sk_test_123"}, "Content-Type": {"application/x-www-form-urlencoded"}, "Stripe-Account": {"acct_1A", "acct_1B"}}},
		{"two PayPal-Auth-Assertion values", "paypal", "/v2/checkout/orders", `{"intent":"CAPTURE"}`, `"name":"RATCHET_BAD_REQUEST"`,
			http.Header{"Authorization": {"Bearer A21AA"}, "Paypal-Auth-Assertion": {"x.A.", "x.B."}}},
		{"a repeated form amount", "stripe", "/v1/payment_intents", "amount=100&currency=usd&amount=6000000", `form field \"amount\"`,
			http.Header{"Authorization": {"Bearer sk_test_123"}, "Content-Type": {"application/x-www-form-urlencoded"}}},
		{"a duplicate JSON key", "adyen", "/v71/payments",
			`{"merchantAccount":"MerchantA","amount":{"currency":"EUR","value":1000},"reference":"n","paymentMethod":{"type":"scheme"},"merchantAccount":"MerchantB"}`,
			`"status":400`, http.Header{"X-Api-Key": {"AQE-key"}, "Idempotency-Key": {"order-1001"}}},
		{"a trailing comma", "checkout", "/payments", `{"amount":6000000,"currency":"USD",}`, `"error_type":"ratchet_bad_request"`,
			http.Header{"Authorization": {"Bearer sk_sbox_1"}}},
		// An amount written so that Ratchet cannot read it would pass every
		// ceiling uncounted, where the vendor (or a lenient parser before
		// it) may read 6000000.0 as 6000000.
		{"a Stripe form amount with a fraction", "stripe", "/v1/payment_intents", "amount=6000000.0&currency=usd", `not a whole number of minor units`,
			http.Header{"Authorization": {"Bearer sk_test_123"}, "Content-Type": {"application/x-www-form-urlencoded"}}},
		{"a Square amount as a float", "square", "/v2/payments",
			`{"idempotency_key":"k-1","source_id":"cnon:x","amount_money":{"amount":6000000.0,"currency":"USD"}}`, `not a whole number of minor units`,
			http.Header{"Authorization": {"Bearer EAAA-token"}}},
		{"an Adyen amount with an exponent", "adyen", "/v71/payments",
			`{"merchantAccount":"MerchantA","amount":{"currency":"EUR","value":6e6},"reference":"n","paymentMethod":{"type":"scheme"}}`,
			`not a whole number of minor units`, http.Header{"X-Api-Key": {"AQE-key"}, "Idempotency-Key": {"order-1002"}}},
		{"a Checkout amount in words", "checkout", "/payments", `{"amount":"six million","currency":"USD"}`, `not a whole number`,
			http.Header{"Authorization": {"Bearer sk_sbox_1"}}},
		{"a Checkout currency that is not a code", "checkout", "/payments", `{"amount":6000000,"currency":"DOLLARS"}`, `three-letter`,
			http.Header{"Authorization": {"Bearer sk_sbox_1"}}},
		{"a PayPal amount with an exponent", "paypal", "/v2/checkout/orders",
			`{"intent":"CAPTURE","purchase_units":[{"amount":{"currency_code":"USD","value":"6e4"}}]}`, `plain decimal`,
			http.Header{"Authorization": {"Bearer A21AA"}}},
		{"a PayPal amount without its currency", "paypal", "/v2/checkout/orders",
			`{"intent":"CAPTURE","purchase_units":[{"amount":{"value":"60000.00"}}]}`, `three-letter`,
			http.Header{"Authorization": {"Bearer A21AA"}}},
		{"a PayPal second purchase unit with an exponent", "paypal", "/v2/checkout/orders",
			`{"intent":"CAPTURE","purchase_units":[{"reference_id":"a","amount":{"currency_code":"USD","value":"1.00"}},{"reference_id":"b","amount":{"currency_code":"USD","value":"6e4"}}]}`, `plain decimal`,
			http.Header{"Authorization": {"Bearer A21AA"}}},
		{"a Square tip in another currency", "square", "/v2/payments",
			`{"idempotency_key":"k-2","source_id":"cnon:x","amount_money":{"amount":1,"currency":"USD"},"tip_money":{"amount":6000000,"currency":"EUR"}}`, `another currency`,
			http.Header{"Authorization": {"Bearer EAAA-token"}}},
		{"a Square tip without its currency", "square", "/v2/payments",
			`{"idempotency_key":"k-3","source_id":"cnon:x","amount_money":{"amount":1,"currency":"USD"},"tip_money":{"amount":6000000}}`, `three-letter`,
			http.Header{"Authorization": {"Bearer EAAA-token"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, hits, resp, b := postThroughProxy(t, c.vendor, c.path, c.body, c.header)
			if resp.StatusCode != 400 {
				t.Fatalf("resp.StatusCode != 400: %d %s; %d calls, %d effects", resp.StatusCode, b, hits.Load(), len(e.effects(t)))
			}
			if !strings.Contains(b, c.want) {
				t.Fatalf("!strings.Contains(b, c.want): %d %s; %d calls, %d effects", resp.StatusCode, b, hits.Load(), len(e.effects(t)))
			}
			if !strings.Contains(b, "nothing was sent") {
				t.Fatalf("!strings.Contains(b, \"nothing was sent\"): %d %s; %d calls, %d effects", resp.StatusCode, b, hits.Load(), len(e.effects(t)))
			}
			if hits.Load() != 0 {
				t.Fatalf("hits.Load() != 0: %d %s; %d calls, %d effects", resp.StatusCode, b, hits.Load(), len(e.effects(t)))
			}
			if len(e.effects(t)) != 0 {
				t.Fatalf("len(e.effects(t)) != 0: %d %s; %d calls, %d effects", resp.StatusCode, b, hits.Load(), len(e.effects(t)))
			}
		})
	}
}

// TestEveryAmountTheVendorChargesIsCounted holds the built-in vendors to
// count money a create moves outside its first amount field: Square charges
// tip_money on top of amount_money (its Payment's total_money is the two
// together), and PayPal creates an order of up to ten purchase_units, each
// with its own amount that the buyer pays. A call that put the money there
// passed every ceiling counted at its first amount only.
func TestEveryAmountTheVendorChargesIsCounted(t *testing.T) {
	cases := []struct {
		name, vendor, path, body string
		header                   http.Header
		wantMicros               int64
	}{
		{"a Square tip on top of a one-cent payment", "square", "/v2/payments",
			`{"idempotency_key":"k-tip","source_id":"cnon:x","amount_money":{"amount":1,"currency":"USD"},"tip_money":{"amount":6000000,"currency":"USD"}}`,
			http.Header{"Authorization": {"Bearer EAAA-token"}}, 60_000_010_000},
		{"a second PayPal purchase unit", "paypal", "/v2/checkout/orders",
			`{"intent":"CAPTURE","purchase_units":[{"reference_id":"a","amount":{"currency_code":"USD","value":"0.01"}},{"reference_id":"b","amount":{"currency_code":"USD","value":"60000.00"}}]}`,
			http.Header{"Authorization": {"Bearer A21AA"}, "Paypal-Request-Id": {"req-pu-1"}}, 60_000_010_000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, hits, resp, b := postThroughProxy(t, c.vendor, c.path, c.body, c.header)
			effects := e.effects(t)
			// Forwarded or held for approval (the test rules hold a large
			// Square payment), the effect is recorded with its cost.
			if len(effects) != 1 {
				t.Fatalf("len(effects) != 1: %d %s; %d calls, %d effects", resp.StatusCode, b, hits.Load(), len(effects))
			}
			var got int64 = -1
			if effects[0].EstimatedCostMicros != nil {
				got = *effects[0].EstimatedCostMicros
			}
			if diff := cmp.Diff(c.wantMicros, got); diff != "" {
				t.Fatalf("the effect's estimated cost is not every amount the vendor charges (-want +got):\n%s", diff)
			}
		})
	}
}
