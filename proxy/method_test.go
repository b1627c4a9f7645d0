package proxy_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// nonStandardMethods are methods a vendor's server may read as POST (or as
// anything) that Ratchet's rules do not name exactly: lower or mixed case,
// and methods of no RFC.
var nonStandardMethods = []string{"post", "Post", "pOST", "put", "delete", "patch", "PROPFIND", "MERGE", "BREW"}

// TestNonStandardMethodsAreRefused: a request whose method is not one of
// RFC 9110's (or PATCH) exactly as written is answered 400 in the vendor's
// error shape, and reaches neither the vendor nor the ledger, in reverse
// and forward mode (plain HTTP and intercepted HTTPS). A lower-case "post"
// used to pass ungated, unstamped and unrecorded. Transparent mode is in
// transparent_internal_test.go.
func TestNonStandardMethodsAreRefused(t *testing.T) {
	up, hits := fixedAnswer(200, "application/json", []byte(`{"id":"pi_1","object":"payment_intent","status":"succeeded"}`))
	defer up.Close()
	e := newEnv(t, map[string]string{"stripe": up.URL}, nil)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.ca.PEM())
	proxyURL, _ := url.Parse(e.url)
	viaProxy := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	modes := []struct {
		name   string
		client *http.Client
		url    string
	}{
		{"reverse", http.DefaultClient, e.url + "/stripe/v1/payment_intents"},
		{"forward (plain HTTP)", viaProxy, "http://api.stripe.com/v1/payment_intents"},
		{"forward (CONNECT)", viaProxy, "https://api.stripe.com/v1/payment_intents"},
	}
	for _, m := range modes {
		for _, method := range nonStandardMethods {
			req, err := http.NewRequest(method, m.url, strings.NewReader("amount=6000000&currency=usd"))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Authorization", "Bearer sk_test_123")
			resp, err := m.client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", m.name, method, err)
			}
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%s %s: status %d, want 400 (%s)", m.name, method, resp.StatusCode, body)
			}
			var shape struct {
				Error struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &shape); err != nil || shape.Error.Code != "ratchet_method_not_allowed" {
				t.Errorf("%s %s: not Stripe's error shape with code ratchet_method_not_allowed: %s", m.name, method, body)
			}
			if !strings.Contains(shape.Error.Message, "nothing was sent or recorded") {
				t.Errorf("%s %s: the message does not say nothing was sent: %q", m.name, method, shape.Error.Message)
			}
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the vendor saw %d requests with a non-standard method", n)
	}
	if effs := e.effects(t); len(effs) != 0 {
		t.Errorf("%d effects recorded for refused requests", len(effs))
	}
	// The standard methods still work: a POST is gated, a GET passes.
	for _, m := range modes {
		req, _ := http.NewRequest(http.MethodPost, m.url, strings.NewReader("amount=100&currency=usd"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer sk_test_123")
		req.Header.Set("Ratchet-Idempotency-Key", "method-test:"+m.name)
		resp, err := m.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if body := readAll(t, resp); resp.Header.Get("Ratchet-Decision") != "execute" {
			t.Errorf("%s POST: decision %q, want execute (%s)", m.name, resp.Header.Get("Ratchet-Decision"), body)
		}
	}
}
