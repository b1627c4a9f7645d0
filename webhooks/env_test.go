package webhooks_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/proxy"
	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/adyen"
	"github.com/ratchet-mcp/ratchet/vendors/checkout"
	"github.com/ratchet-mcp/ratchet/vendors/paypal"
	"github.com/ratchet-mcp/ratchet/vendors/square"
	"github.com/ratchet-mcp/ratchet/vendors/stripe"
	"github.com/ratchet-mcp/ratchet/webhooks"
)

// fakeVendor answers every vendor's create request the way the vendor
// does, or hangs until the proxy gives up (a hung upstream: the outcome
// is unknown). It keeps the last request it saw.
type fakeVendor struct {
	hang atomic.Bool
	slow atomic.Int64 // nanoseconds to wait before answering
	hits atomic.Int64
	mu   sync.Mutex
	body []byte
	hdr  http.Header
}

func (f *fakeVendor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.body, f.hdr = b, r.Header.Clone()
	f.mu.Unlock()
	f.hits.Add(1)
	if f.hang.Load() {
		<-r.Context().Done()
		return
	}
	time.Sleep(time.Duration(f.slow.Load()))
	w.Header().Set("Content-Type", "application/json")
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/payment_intents"):
		io.WriteString(w, `{"id":"pi_fake","object":"payment_intent","amount":2000,"currency":"usd","status":"succeeded"}`)
	case strings.HasPrefix(r.URL.Path, "/v2/payments"):
		io.WriteString(w, `{"payment":{"id":"sq_fake","status":"COMPLETED"}}`)
	case strings.HasSuffix(r.URL.Path, "/payments") && strings.HasPrefix(r.URL.Path, "/v71"):
		io.WriteString(w, `{"pspReference":"PSP_FAKE","resultCode":"Authorised"}`)
	case r.URL.Path == "/payments":
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"pay_fake","approved":true,"status":"Authorized"}`)
	case r.URL.Path == "/v2/checkout/orders":
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"ORDER_FAKE","status":"CREATED"}`)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func (f *fakeVendor) last() ([]byte, http.Header) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.body, f.hdr
}

// counts is an Observer that counts stages.
type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) Webhook(vendor, stage string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[vendor+":"+stage]++
}

func (c *counts) get(vendor, stage string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[vendor+":"+stage]
}

// Secrets of the tests' receivers.
const (
	stripeSecret    = "whsec_test_secret"
	squareKey       = "square-signature-key"
	squareURL       = "https://ratchet.example.com/webhooks/square"
	checkoutSecret  = "checkout-webhook-secret"
	paypalWebhookID = "1JE4291016473214C"
	adyenPassword   = "adyen-basic-password"
)

var adyenKey = []byte{0x44, 0x78, 0x2d, 0xef, 0x54, 0x7a, 0xaa, 0x06, 0xc9, 0x10, 0xc4, 0x39, 0x32, 0xb1, 0xeb, 0x0c,
	0x71, 0xfc, 0x68, 0xd9, 0xd0, 0xc0, 0x57, 0x55, 0x0c, 0x48, 0xec, 0x2a, 0xcf, 0x6b, 0xa0, 0x56}

// env is the proxy in front of a fake vendor, the webhook receivers, and
// one ledger under both.
type env struct {
	eng      *ledger.Engine
	proxyURL string
	hookURL  string
	vendor   *fakeVendor
	obs      *counts
	paypal   *rsa.PrivateKey
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvHold(t, -1)
}

// newEnvHold is newEnv with the receivers' Hold.
func newEnvHold(t *testing.T, hold time.Duration) *env {
	t.Helper()
	dir := t.TempDir()
	eng := enginetest.Open(t, dir, ledger.Options{})
	fv := &fakeVendor{}
	up := httptest.NewServer(fv)
	t.Cleanup(up.Close)
	rates := map[string]int64{"usd": 1_000_000, "eur": 1_080_000}
	p, err := proxy.New(eng, proxy.Options{UpstreamTimeout: 300 * time.Millisecond, CurrencyMicros: rates,
		Upstreams: map[string]string{"stripe": up.URL, "square": up.URL, "adyen": up.URL, "checkout": up.URL, "paypal": up.URL}})
	if err != nil {
		t.Fatal(err)
	}
	ps := httptest.NewServer(p)
	t.Cleanup(ps.Close)
	key, cert := paypalCert(t)
	e := &env{eng: eng, proxyURL: ps.URL, vendor: fv, obs: &counts{}, paypal: key}
	h := webhooks.New(eng, webhooks.Options{
		Receivers: map[string]vendors.Receiver{
			"stripe":   &stripe.Webhook{Secrets: []string{stripeSecret}},
			"square":   &square.Webhook{SignatureKey: squareKey, NotificationURL: squareURL},
			"adyen":    &adyen.Webhook{HMACKeys: [][]byte{adyenKey}, BasicUser: "adyen", BasicPassword: adyenPassword},
			"checkout": &checkout.Webhook{Secrets: []string{checkoutSecret}},
			"paypal":   &paypal.Webhook{WebhookID: paypalWebhookID, Certs: []*x509.Certificate{cert}},
		},
		CurrencyMicros: rates, Observer: e.obs, Hold: hold,
	})
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	e.hookURL = hs.URL
	return e
}

// paypalCert is a stand-in for PayPal's signing certificate.
func paypalCert(t *testing.T) (*rsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "messageverificationcerts.paypal.com"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert
}

// send posts through the proxy.
func (e *env) send(t *testing.T, method, path string, hdr http.Header, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, e.proxyURL+path, strings.NewReader(body))
	req.Header = hdr.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp
}

// post delivers an event to a receiver; returns the status.
func (e *env) post(t *testing.T, vendor string, hdr http.Header, body []byte) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.hookURL+webhooks.PathPrefix+vendor, bytes.NewReader(body))
	req.Header = hdr
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (e *env) effect(t *testing.T, id string) *ledger.Effect {
	t.Helper()
	eff, err := e.eng.Get(context.Background(), "", id, "")
	if err != nil {
		t.Fatal(err)
	}
	return eff
}

// jsonAt reads a string at a path of a JSON body.
func jsonAt(b []byte, path ...any) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return ""
	}
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return ""
			}
			v = a[k]
		}
	}
	s, _ := v.(string)
	return s
}
