package webhooks_test

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/adyen"
	"github.com/ratchet-mcp/ratchet/vendors/checkout"
	"github.com/ratchet-mcp/ratchet/vendors/paypal"
	"github.com/ratchet-mcp/ratchet/vendors/square"
	"github.com/ratchet-mcp/ratchet/vendors/stripe"
	"github.com/ratchet-mcp/ratchet/webhooks"
)

// The fixtures in testdata are shaped after each vendor's documented
// samples, with __TAG__ where the event echoes Ratchet's vendor key:
//   - stripe_*: the event object, https://docs.stripe.com/api/events/object
//     (request.idempotency_key), a PaymentIntent under data.object;
//   - square_payment_updated.json: https://developer.squareup.com/reference/square/payments-api/webhooks/payment.updated;
//   - adyen_authorisation.json: the standard webhook's AUTHORISATION item,
//     https://docs.adyen.com/development-resources/webhooks/webhook-types;
//   - checkout_*: https://www.checkout.com/docs/workflows/webhook-event-types/payment_approved;
//   - paypal_payment_capture_completed.json: the PAYMENT.CAPTURE.COMPLETED
//     sample of https://developer.paypal.com/api/rest/webhooks/event-names/.

// vendorCase is one vendor's request through the proxy and its events.
type vendorCase struct {
	name, path, body string
	hdr              http.Header
	// tag is what the vendor will echo: read from the request it got.
	tag func(body []byte, hdr http.Header) string
	// event builds a signed event saying ok (or failed) about tag; forged
	// signs it with the wrong secret, stale with an old timestamp (nil
	// when the vendor signs no time).
	event func(t *testing.T, e *env, tag string, ok bool, sign signing) (http.Header, []byte)
	// alter changes what the signature covers (default: the body).
	alter      func([]byte) []byte
	canFail    bool // the vendor has an event that says the request failed
	cost       int64
	ref        string
	staleSigns bool
}

// transmissions numbers PayPal's transmission ids, one per delivery.
var transmissions atomic.Int64

type signing int

const (
	good signing = iota
	forged
	stale
)

func fixture(t *testing.T, name string, repl ...string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(strings.NewReplacer(repl...).Replace(string(b)))
}

func vendorCases() []vendorCase {
	return []vendorCase{
		{
			name: "stripe", path: "/stripe/v1/payment_intents", body: "amount=2000&currency=usd&customer=cus_1",
			hdr: http.Header{"Authorization": {"Bearer sk_test_123"}, "Content-Type": {"application/x-www-form-urlencoded"}},
			tag: func(_ []byte, h http.Header) string { return h.Get("Idempotency-Key") },
			event: func(t *testing.T, e *env, tag string, ok bool, sign signing) (http.Header, []byte) {
				name := "stripe_payment_intent_succeeded.json"
				if !ok {
					name = "stripe_payment_intent_payment_failed.json"
				}
				body := fixture(t, name, "__TAG__", tag)
				p := &webhook.UnsignedPayload{Payload: body, Secret: stripeSecret, Timestamp: time.Now()}
				switch sign {
				case forged:
					p.Secret = "whsec_someone_else"
				case stale:
					p.Timestamp = time.Now().Add(-10 * time.Minute)
				}
				return http.Header{"Stripe-Signature": {webhook.GenerateTestSignedPayload(p).Header}}, body
			},
			canFail: true, cost: 20_000_000, ref: "pi_3PTtW2LkdIwHu7ix0k8eTQNM", staleSigns: true,
		},
		{
			name: "square", path: "/square/v2/payments",
			body: `{"idempotency_key":"sdk-key-1","source_id":"cnon:card-nonce-ok","amount_money":{"amount":100,"currency":"USD"},"location_id":"L1"}`,
			hdr:  http.Header{"Authorization": {"Bearer EAAA-square"}, "Content-Type": {"application/json"}},
			tag:  func(b []byte, _ http.Header) string { return jsonAt(b, "reference_id") },
			event: func(t *testing.T, e *env, tag string, ok bool, sign signing) (http.Header, []byte) {
				status := "COMPLETED"
				if !ok {
					status = "FAILED"
				}
				body := fixture(t, "square_payment_updated.json", "__TAG__", tag, "__STATUS__", status)
				key := squareKey
				if sign == forged {
					key = "another-key"
				}
				return http.Header{"X-Square-Hmacsha256-Signature": {square.Signature(key, squareURL, body)}}, body
			},
			// FAILED matches only by reference_id, which the caller may fill:
			// never trusted (TestACallersTagNeverSettlesAnotherEffect).
			cost: 1_000_000, ref: "hYy9pRFVxpDsO1FB05SunFWUe9JZY",
		},
		{
			name: "adyen", path: "/adyen/v71/payments",
			body: `{"amount":{"currency":"EUR","value":1000},"reference":"YOUR_MERCHANT_REFERENCE","merchantAccount":"YOUR_MERCHANT_ACCOUNT","paymentMethod":{"type":"scheme","encryptedCardNumber":"x"}}`,
			hdr:  http.Header{"X-Api-Key": {"AQE-adyen-key"}, "Content-Type": {"application/json"}},
			tag:  func(b []byte, _ http.Header) string { return jsonAt(b, "metadata", "ratchet_key") },
			event: func(t *testing.T, e *env, tag string, ok bool, sign signing) (http.Header, []byte) {
				success := "true"
				if !ok {
					success = "false"
				}
				key := adyenKey
				if sign == forged {
					key = []byte("another key entirely, 32 bytes!")
				}
				sig := adyen.Signature(key, "YOUR_PSP_REFERENCE", "", "YOUR_MERCHANT_ACCOUNT", "YOUR_MERCHANT_REFERENCE",
					1000, "EUR", "AUTHORISATION", success)
				h := http.Header{}
				(&http.Request{Header: h}).SetBasicAuth("adyen", adyenPassword)
				return h, fixture(t, "adyen_authorisation.json", "__TAG__", tag, "__SUCCESS__", success, "__HMAC__", sig)
			},
			// Adyen signs fields, not the body: alter a signed one.
			alter: func(b []byte) []byte {
				return []byte(strings.Replace(string(b), `"value": 1000`, `"value": 1`, 1))
			},
			canFail: true, cost: 10_800_000, ref: "YOUR_PSP_REFERENCE",
		},
		{
			name: "checkout", path: "/checkout/payments",
			body: `{"amount":2000,"currency":"USD","reference":"ORD-5023-4E89","source":{"type":"token","token":"tok_ubfj2q76miwundwlk72vxt2i7q"},"metadata":{"coupon_code":"NY2018"}}`,
			hdr:  http.Header{"Authorization": {"Bearer sk_sbox_checkout"}, "Content-Type": {"application/json"}},
			tag:  func(b []byte, _ http.Header) string { return jsonAt(b, "metadata", "ratchet_key") },
			event: func(t *testing.T, e *env, tag string, ok bool, sign signing) (http.Header, []byte) {
				name := "checkout_payment_approved.json"
				if !ok {
					name = "checkout_payment_declined.json"
				}
				body := fixture(t, name, "__TAG__", tag)
				secret := checkoutSecret
				if sign == forged {
					secret = "another-secret"
				}
				return http.Header{"Cko-Signature": {checkout.Signature(secret, body)}}, body
			},
			canFail: true, cost: 20_000_000, ref: "pay_griq7wyqkggu7mnk7ecm6ysrl4",
		},
		{
			name: "paypal", path: "/paypal/v2/checkout/orders",
			body: `{"intent":"CAPTURE","purchase_units":[{"reference_id":"d9f80740","amount":{"currency_code":"USD","value":"10.00"}}]}`,
			hdr:  http.Header{"Authorization": {"Basic Y2xpZW50OnNlY3JldA=="}, "Content-Type": {"application/json"}},
			tag:  func(b []byte, _ http.Header) string { return jsonAt(b, "purchase_units", 0, "custom_id") },
			event: func(t *testing.T, e *env, tag string, ok bool, sign signing) (http.Header, []byte) {
				body := fixture(t, "paypal_payment_capture_completed.json", "__TAG__", tag)
				at := time.Now().UTC()
				if sign == stale {
					at = at.Add(-10 * time.Minute)
				}
				id, when := fmt.Sprintf("8d0d5ee0-3d5e-11ef-8a3c-%012d", transmissions.Add(1)), at.Format(time.RFC3339)
				key := e.paypal
				if sign == forged {
					key, _ = rsa.GenerateKey(rand.Reader, 2048)
				}
				digest := sha256.Sum256([]byte(paypal.Signed(id, when, paypalWebhookID, body)))
				sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest[:])
				if err != nil {
					t.Fatal(err)
				}
				return http.Header{"Paypal-Transmission-Id": {id}, "Paypal-Transmission-Time": {when},
					"Paypal-Transmission-Sig": {base64.StdEncoding.EncodeToString(sig)}, "Paypal-Auth-Algo": {"SHA256withRSA"},
					"Paypal-Cert-Url": {"https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-a5cafa77"}}, body
			},
			cost: 10_000_000, ref: "5O190127TN364715T", staleSigns: true,
		},
	}
}

// hung sends c's request through the proxy to a vendor that never answers:
// the proxy gives up, the outcome is unknown, the effect indeterminate.
// It returns the effect id and the tag the vendor got.
func hung(t *testing.T, e *env, c vendorCase, key string) (string, string) {
	t.Helper()
	e.vendor.hang.Store(true)
	defer e.vendor.hang.Store(false)
	hdr := c.hdr.Clone()
	hdr.Set("Ratchet-Idempotency-Key", key)
	resp := e.send(t, http.MethodPost, c.path, hdr, c.body)
	id := resp.Header.Get("Ratchet-Effect-Id")
	if resp.StatusCode < 500 || id == "" {
		t.Fatalf("a hung upstream: %d %v", resp.StatusCode, resp.Header)
	}
	body, h := e.vendor.last()
	tag := c.tag(body, h)
	if tag == "" || tag != resp.Header.Get("Ratchet-Vendor-Key") {
		t.Fatalf("the vendor got tag %q, Ratchet handed out %q", tag, resp.Header.Get("Ratchet-Vendor-Key"))
	}
	if eff := e.effect(t, id); eff.State != ledger.StateIndeterminate {
		t.Fatalf("after a hung upstream: %s", eff.State)
	}
	if r := e.send(t, http.MethodPost, c.path, hdr, c.body); r.Header.Get("Ratchet-Decision") != string(ledger.DecisionBlocked) {
		t.Fatalf("the retry while unknown: %d %v", r.StatusCode, r.Header)
	}
	return id, tag
}

// TestAVendorsSignedEventSettlesAnEffectTheProxyLostTrackOf: for each
// vendor, an effect made indeterminate by a hung upstream settles when
// the vendor's signed event arrives; a forged or stale signature and an
// event about an unknown key change nothing; the event again changes
// nothing; the blocked retry is then a duplicate, never sent again.
func TestAVendorsSignedEventSettlesAnEffectTheProxyLostTrackOf(t *testing.T) {
	for _, c := range vendorCases() {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			id, tag := hung(t, e, c, c.name+":ok")
			unchanged := func(what string, status, want int) {
				t.Helper()
				if status != want {
					t.Fatalf("%s: status %d, want %d", what, status, want)
				}
				if eff := e.effect(t, id); eff.State != ledger.StateIndeterminate {
					t.Fatalf("%s changed the effect: %s", what, eff.State)
				}
			}
			h, b := c.event(t, e, tag, true, forged)
			unchanged("a forged signature", e.post(t, c.name, h, b), http.StatusUnauthorized)
			h, b = c.event(t, e, tag, true, good)
			alter := c.alter
			if alter == nil {
				alter = func(b []byte) []byte { return append(b, ' ') }
			}
			unchanged("an event altered after signing", e.post(t, c.name, h, alter(b)), http.StatusUnauthorized)
			if c.staleSigns {
				h, b = c.event(t, e, tag, true, stale)
				unchanged("a stale timestamp", e.post(t, c.name, h, b), http.StatusUnauthorized)
			}
			h, b = c.event(t, e, "0f8fad5b-d9cb-869f-a165-70867728950e", true, good)
			unchanged("an unknown key", e.post(t, c.name, h, b), http.StatusOK)
			if e.obs.get(c.name, "unknown") != 1 || e.obs.get(c.name, "refused") < 2 {
				t.Fatalf("counts: %v", e.obs.n)
			}

			h, b = c.event(t, e, tag, true, good)
			if s := e.post(t, c.name, h, b); s != http.StatusOK {
				t.Fatalf("the signed event: %d", s)
			}
			eff := e.effect(t, id)
			if eff.State != ledger.StateSucceeded || eff.VendorReference != c.ref || eff.ActualCostMicros == nil ||
				*eff.ActualCostMicros != c.cost || eff.ResolvedBy != "webhook:"+c.name {
				t.Fatalf("after the event: %+v", eff)
			}
			// The vendor retries its delivery: nothing changes.
			if s := e.post(t, c.name, h, b); s != http.StatusOK || e.obs.get(c.name, "settled") != 1 || e.obs.get(c.name, "agreed") != 1 {
				t.Fatalf("the event again: %d %v", s, e.obs.n)
			}
			hits := e.vendor.hits.Load()
			hdr := c.hdr.Clone()
			hdr.Set("Ratchet-Idempotency-Key", c.name+":ok")
			r := e.send(t, http.MethodPost, c.path, hdr, c.body)
			if r.Header.Get("Ratchet-Decision") != string(ledger.DecisionDuplicate) || e.vendor.hits.Load() != hits {
				t.Fatalf("the retry after the event: %d %v, vendor hits %d → %d", r.StatusCode, r.Header, hits, e.vendor.hits.Load())
			}
			// Stripe's event carries the PaymentIntent, the create's own
			// answer: the retry gets it replayed. The others' events carry
			// no answer of the request: the retry gets the object's id.
			body, _ := io.ReadAll(r.Body)
			if replayed := r.Header.Get("Ratchet-Replayed") == "true"; replayed != (c.name == "stripe") ||
				(replayed && (r.StatusCode != http.StatusOK || jsonAt(body, "id") != c.ref)) ||
				(!replayed && (r.StatusCode < 400 || !strings.Contains(string(body), c.ref))) {
				t.Fatalf("the retry's answer: %d %v %s", r.StatusCode, r.Header, body)
			}
		})
	}
}

// TestAVendorsSignedFailureFreesTheKey: an event that says the request
// failed settles the effect failed, and the blocked retry is a new
// attempt that reaches the vendor.
func TestAVendorsSignedFailureFreesTheKey(t *testing.T) {
	for _, c := range vendorCases() {
		if !c.canFail {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			id, tag := hung(t, e, c, c.name+":fail")
			h, b := c.event(t, e, tag, false, good)
			if s := e.post(t, c.name, h, b); s != http.StatusOK {
				t.Fatalf("the event: %d", s)
			}
			if eff := e.effect(t, id); eff.State != ledger.StateFailed || eff.ResolvedBy != "webhook:"+c.name {
				t.Fatalf("after the failure event: %+v", eff)
			}
			hits := e.vendor.hits.Load()
			hdr := c.hdr.Clone()
			hdr.Set("Ratchet-Idempotency-Key", c.name+":fail")
			r := e.send(t, http.MethodPost, c.path, hdr, c.body)
			if r.Header.Get("Ratchet-Decision") != string(ledger.DecisionExecute) || e.vendor.hits.Load() != hits+1 {
				t.Fatalf("the retry: %d %v", r.StatusCode, r.Header)
			}
			if nt := r.Header.Get("Ratchet-Vendor-Key"); nt == tag {
				t.Fatal("the new attempt reused the failed attempt's vendor key")
			}
			if eff := e.effect(t, id); eff.State != ledger.StateSucceeded || eff.Attempt != 2 {
				t.Fatalf("attempt 2: %+v", eff)
			}
		})
	}
}

// TestAContradictingEventIsFlaggedAndChangesNothing: the proxy reported
// success; an event that says the attempt failed changes nothing and is
// counted (and queued for the operator by the engine).
func TestAContradictingEventIsFlaggedAndChangesNothing(t *testing.T) {
	e := newEnv(t)
	c := vendorCases()[0]
	hdr := c.hdr.Clone()
	hdr.Set("Ratchet-Idempotency-Key", "stripe:definite")
	r := e.send(t, http.MethodPost, c.path, hdr, c.body)
	id, tag := r.Header.Get("Ratchet-Effect-Id"), r.Header.Get("Ratchet-Vendor-Key")
	if r.StatusCode != http.StatusOK || e.effect(t, id).State != ledger.StateSucceeded {
		t.Fatalf("the call: %d", r.StatusCode)
	}
	h, b := c.event(t, e, tag, false, good)
	if s := e.post(t, "stripe", h, b); s != http.StatusOK || e.obs.get("stripe", "contradicted") != 1 {
		t.Fatalf("the contradicting event: %d %v", s, e.obs.n)
	}
	if eff := e.effect(t, id); eff.State != ledger.StateSucceeded {
		t.Fatalf("a contradicting event changed the effect: %+v", eff)
	}
}

// TestBrokenRequestsAreRefused: an unreadable body, an unconfigured
// vendor and a GET change nothing.
func TestBrokenRequestsAreRefused(t *testing.T) {
	e := newEnv(t)
	h := http.Header{}
	(&http.Request{Header: h}).SetBasicAuth("adyen", adyenPassword)
	if s := e.post(t, "adyen", h, fixture(t, "adyen_broken_truncated.json")); s != http.StatusBadRequest {
		t.Fatalf("a truncated body: %d", s)
	}
	if s := e.post(t, "braintree", http.Header{}, []byte(`{}`)); s != http.StatusNotFound {
		t.Fatalf("an unknown vendor: %d", s)
	}
	resp, err := http.Get(e.hookURL + webhooks.PathPrefix + "stripe")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
}

// TestAdyensUnsignedTagNeedsBasicAuthentication: Adyen's HMAC does not
// cover additionalData, so without Basic authentication a genuine item
// whose metadata names an effect does not settle it (it matches only by
// the signed merchantReference); with the wrong password it is refused.
func TestAdyensUnsignedTagNeedsBasicAuthentication(t *testing.T) {
	e := newEnv(t)
	c := vendorCases()[2]
	id, tag := hung(t, e, c, "adyen:basic")
	h, b := c.event(t, e, tag, true, good)
	h.Del("Authorization")
	if s := e.post(t, "adyen", h, b); s != http.StatusUnauthorized {
		t.Fatalf("no Basic authentication where it is configured: %d", s)
	}
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("adyen:wrong")))
	if s := e.post(t, "adyen", h, b); s != http.StatusUnauthorized {
		t.Fatalf("a wrong password: %d", s)
	}
	open := webhooks.New(e.eng, webhooks.Options{Receivers: map[string]vendors.Receiver{"adyen": &adyen.Webhook{HMACKeys: [][]byte{adyenKey}}}, Observer: e.obs})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, webhooks.PathPrefix+"adyen", bytes.NewReader(b))
	open.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Body.String() != "[accepted]" {
		t.Fatalf("without Basic authentication configured: %d %q", rec.Code, rec.Body)
	}
	if eff := e.effect(t, id); eff.State != ledger.StateIndeterminate {
		t.Fatalf("an unsigned tag settled the effect: %s", eff.State)
	}
	// The signed merchantReference, when an agent made it the vendor key,
	// matches without Basic authentication.
	sig := adyen.Signature(adyenKey, "PSP2", "", "YOUR_MERCHANT_ACCOUNT", tag, 1000, "EUR", "AUTHORISATION", "true")
	b = fixture(t, "adyen_authorisation.json", "__TAG__", "", "__SUCCESS__", "true", "__HMAC__", sig,
		`"merchantReference": "YOUR_MERCHANT_REFERENCE"`, `"merchantReference": "`+tag+`"`, `"YOUR_PSP_REFERENCE"`, `"PSP2"`)
	rec = httptest.NewRecorder()
	open.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, webhooks.PathPrefix+"adyen", bytes.NewReader(b)))
	if eff := e.effect(t, id); rec.Code != http.StatusOK || eff.State != ledger.StateSucceeded || eff.VendorReference != "PSP2" {
		t.Fatalf("by merchantReference: %d %+v", rec.Code, eff)
	}
}

// TestAnEventThatOvertakesTheProxysReportWaitsForIt: the vendor's event
// arrives while the proxy is still reading the vendor's answer. With the
// hold, the proxy's report lands first and keeps the answer, so the
// retry gets the vendor's object replayed; without it the event settles
// first and the retry gets only the object's id (the engine's settlement
// keeps no answer).
func TestAnEventThatOvertakesTheProxysReportWaitsForIt(t *testing.T) {
	for _, hold := range []time.Duration{webhooks.DefaultHold, -1} {
		t.Run(fmt.Sprint("hold ", hold), func(t *testing.T) {
			e := newEnvHold(t, hold)
			c := vendorCases()[0]
			e.vendor.slow.Store(int64(200 * time.Millisecond))
			hdr := c.hdr.Clone()
			hdr.Set("Ratchet-Idempotency-Key", "stripe:overtaken")
			done := make(chan *http.Response)
			go func() { done <- e.send(t, http.MethodPost, c.path, hdr, c.body) }()
			var tag string
			for tag == "" {
				time.Sleep(10 * time.Millisecond)
				_, h := e.vendor.last()
				tag = c.tag(nil, h)
			}
			h, b := c.event(t, e, tag, true, good)
			if s := e.post(t, "stripe", h, b); s != http.StatusOK {
				t.Fatalf("the event: %d", s)
			}
			first := <-done
			if first.StatusCode != http.StatusOK {
				t.Fatalf("the call: %d", first.StatusCode)
			}
			r := e.send(t, http.MethodPost, c.path, hdr, c.body)
			// Either way the retry gets an answer replayed: the vendor's own
			// (pi_fake) when the report came first, the event's PaymentIntent
			// when the event did.
			body, _ := io.ReadAll(r.Body)
			want := map[bool]string{true: "pi_fake", false: "pi_3PTtW2LkdIwHu7ix0k8eTQNM"}[hold > 0]
			if r.Header.Get("Ratchet-Replayed") != "true" || r.StatusCode != http.StatusOK || jsonAt(body, "id") != want {
				t.Fatalf("the retry: %d %v %s", r.StatusCode, r.Header, body)
			}
			if hold > 0 && e.obs.get("stripe", "agreed") != 1 {
				t.Fatalf("with the hold the report settled it and the event agreed: %v", e.obs.n)
			}
		})
	}
}

// TestACallersTagNeverSettlesAnotherEffect: effect A is indeterminate (its
// charge may well have gone through). The same caller sends another
// payment B through the proxy, filling a tag field with A's vendor key
// (which the proxy handed it in Ratchet-Vendor-Key), so that the vendor's
// signed decline of B would name A and free A's key. Ratchet's own field
// (metadata.ratchet_key: Adyen, Checkout.com) cannot carry it: B is
// refused 400 in the vendor's shape and never sent. A shared field the
// caller may fill (Square reference_id, Checkout.com reference, Adyen
// merchantReference) goes as the caller wrote it, and the decline echoing
// A's key there does not settle A. Either way A stays indeterminate and
// its retry blocked.
func TestACallersTagNeverSettlesAnotherEffect(t *testing.T) {
	ownField := map[string]func(body, tag string) string{
		"checkout": func(b, tag string) string {
			return strings.Replace(b, `"metadata":{"coupon_code":"NY2018"}`, `"metadata":{"coupon_code":"NY2018","ratchet_key":"`+tag+`"}`, 1)
		},
		"adyen": func(b, tag string) string { return `{"metadata":{"ratchet_key":"` + tag + `"},` + b[1:] },
	}
	for _, c := range vendorCases() {
		f := ownField[c.name]
		if f == nil {
			continue
		}
		t.Run(c.name+" metadata.ratchet_key", func(t *testing.T) {
			e := newEnv(t)
			idA, tagA := hung(t, e, c, c.name+":A")
			hits := e.vendor.hits.Load()
			hdr := c.hdr.Clone()
			hdr.Set("Ratchet-Idempotency-Key", c.name+":B")
			rB := e.send(t, http.MethodPost, c.path, hdr, f(c.body, tagA))
			body, _ := io.ReadAll(rB.Body)
			if rB.StatusCode != http.StatusBadRequest || e.vendor.hits.Load() != hits || !strings.Contains(string(body), "ratchet_key") {
				t.Fatalf("B with A's tag: %d %s; vendor hits %d → %d", rB.StatusCode, body, hits, e.vendor.hits.Load())
			}
			if effB := e.effect(t, rB.Header.Get("Ratchet-Effect-Id")); effB.State != ledger.StateFailed {
				t.Fatalf("B, never sent: %s", effB.State)
			}
			hdr.Set("Ratchet-Idempotency-Key", c.name+":A")
			if r := e.send(t, http.MethodPost, c.path, hdr, c.body); e.effect(t, idA).State != ledger.StateIndeterminate ||
				r.Header.Get("Ratchet-Decision") != string(ledger.DecisionBlocked) {
				t.Fatalf("A after B: %s, retry %v", e.effect(t, idA).State, r.Header)
			}
		})
	}
	// Shared fields: the caller's value goes out; a decline that names A
	// only there settles nothing.
	t.Run("square reference_id", func(t *testing.T) {
		e := newEnv(t)
		c := vendorCases()[1]
		idA, tagA := hung(t, e, c, "square:A")
		hdr := c.hdr.Clone()
		hdr.Set("Ratchet-Idempotency-Key", "square:B")
		e.send(t, http.MethodPost, c.path, hdr, `{"reference_id":"`+tagA+`",`+c.body[1:])
		if body, _ := e.vendor.last(); jsonAt(body, "reference_id") != tagA {
			t.Fatalf("the caller's reference_id was not kept: %s", body)
		}
		h, b := c.event(t, e, tagA, false, good)
		if s := e.post(t, "square", h, b); s != http.StatusOK || e.obs.get("square", "ignored") != 1 {
			t.Fatalf("the decline: %d %v", s, e.obs.n)
		}
		if eff := e.effect(t, idA); eff.State != ledger.StateIndeterminate {
			t.Fatalf("B's decline settled A %s", eff.State)
		}
		// A's own success, echoed the same way, still settles it.
		h, b = c.event(t, e, tagA, true, good)
		if s := e.post(t, "square", h, b); s != http.StatusOK || e.effect(t, idA).State != ledger.StateSucceeded {
			t.Fatalf("a success by reference_id: %d %s", s, e.effect(t, idA).State)
		}
	})
	t.Run("checkout reference", func(t *testing.T) {
		e := newEnv(t)
		c := vendorCases()[3]
		idA, tagA := hung(t, e, c, "checkout:A")
		// The vendor's decline of B: Ratchet's tag is B's (or missing), the
		// caller's reference is A's key.
		b := fixture(t, "checkout_payment_declined.json", `"ratchet_key": "__TAG__"`, `"other": "x"`, "ORD-5023-4E89", tagA)
		h := http.Header{"Cko-Signature": {checkout.Signature(checkoutSecret, b)}}
		if s := e.post(t, "checkout", h, b); s != http.StatusOK || e.effect(t, idA).State != ledger.StateIndeterminate {
			t.Fatalf("a decline naming A by its reference: %d, A %s", s, e.effect(t, idA).State)
		}
	})
	t.Run("adyen merchantReference", func(t *testing.T) {
		e := newEnv(t)
		c := vendorCases()[2]
		idA, tagA := hung(t, e, c, "adyen:A")
		sig := adyen.Signature(adyenKey, "PSP_B", "", "YOUR_MERCHANT_ACCOUNT", tagA, 1000, "EUR", "AUTHORISATION", "false")
		b := fixture(t, "adyen_authorisation.json", "__TAG__", "", "__SUCCESS__", "false", "__HMAC__", sig,
			`"merchantReference": "YOUR_MERCHANT_REFERENCE"`, `"merchantReference": "`+tagA+`"`, `"YOUR_PSP_REFERENCE"`, `"PSP_B"`)
		h := http.Header{}
		(&http.Request{Header: h}).SetBasicAuth("adyen", adyenPassword)
		if s := e.post(t, "adyen", h, b); s != http.StatusOK || e.effect(t, idA).State != ledger.StateIndeterminate {
			t.Fatalf("a refusal naming A by its merchantReference: %d, A %s", s, e.effect(t, idA).State)
		}
	})
}

// forgeCRC returns body with 4 bytes at off chosen so that its CRC32 is
// want (CRC32 is affine in the message bits).
func forgeCRC(body []byte, off int, want uint32) []byte {
	f := func(x uint32) uint32 {
		b := append([]byte(nil), body...)
		b[off], b[off+1], b[off+2], b[off+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
		return crc32.ChecksumIEEE(b)
	}
	f0 := f(0)
	type row struct{ v, m uint32 }
	var basis [32]*row
	for i := 0; i < 32; i++ {
		v, m := f(1<<i)^f0, uint32(1)<<i
		for bit := 31; bit >= 0; bit-- {
			if v>>bit&1 == 0 {
				continue
			}
			if basis[bit] == nil {
				basis[bit] = &row{v, m}
				break
			}
			v, m = v^basis[bit].v, m^basis[bit].m
		}
	}
	tv, x := want^f0, uint32(0)
	for bit := 31; bit >= 0; bit-- {
		if tv>>bit&1 == 1 && basis[bit] != nil {
			tv, x = tv^basis[bit].v, x^basis[bit].m
		}
	}
	out := append([]byte(nil), body...)
	out[off], out[off+1], out[off+2], out[off+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
	return out
}

// TestAnAlteredPayPalBodyIsRefusedAfterARestart: PayPal signs the body
// only through its CRC32. A genuine delivery (about a payment that is
// none of Ratchet's) seen by whoever sits where TLS ends, altered to name
// effect A's tag with the same CRC32, is refused by a receiver that
// restarted (or another replica) within the tolerance: the transmission
// id is bound durably, in the ledger, to the SHA-256 of the genuine body.
func TestAnAlteredPayPalBodyIsRefusedAfterARestart(t *testing.T) {
	e := newEnv(t)
	c := vendorCases()[4]
	if c.name != "paypal" {
		t.Fatal("case order")
	}
	idA, tagA := hung(t, e, c, "paypal:A")
	key, cert := paypalCert(t)
	genuine := fixture(t, "paypal_payment_capture_completed.json", "__TAG__", "not-a-ratchet-order-0000000000000000")
	id, when := "8d0d5ee0-3d5e-11ef-8a3c-review000001", time.Now().UTC().Format(time.RFC3339)
	digest := sha256.Sum256([]byte(paypal.Signed(id, when, paypalWebhookID, genuine)))
	sig, _ := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest[:])
	hdr := http.Header{"Paypal-Transmission-Id": {id}, "Paypal-Transmission-Time": {when}, "Content-Type": {"application/json"},
		"Paypal-Transmission-Sig": {base64.StdEncoding.EncodeToString(sig)}, "Paypal-Auth-Algo": {"SHA256withRSA"}}
	receiver := func() http.Handler {
		return webhooks.New(e.eng, webhooks.Options{Hold: -1,
			Receivers: map[string]vendors.Receiver{"paypal": &paypal.Webhook{WebhookID: paypalWebhookID, Certs: []*x509.Certificate{cert}}}})
	}
	post := func(h http.Handler, b []byte) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, webhooks.PathPrefix+"paypal", bytes.NewReader(b))
		req.Header = hdr.Clone()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if s := post(receiver(), genuine); s != http.StatusOK {
		t.Fatalf("genuine: %d", s)
	}
	want := crc32.ChecksumIEEE(genuine)
	var forged []byte
	for pad := 0; pad < 64 && forged == nil; pad++ {
		alt := strings.Replace(string(genuine), "not-a-ratchet-order-0000000000000000", tagA, 1)
		alt = `{"x":"` + strings.Repeat("a", pad) + `XXXX",` + alt[1:]
		b := forgeCRC([]byte(alt), 6+pad, want)
		ok := true
		for _, ch := range b[6+pad : 10+pad] {
			if ch < 0x20 || ch == '"' || ch == '\\' {
				ok = false
			}
		}
		if ok {
			forged = b
		}
	}
	if forged == nil || crc32.ChecksumIEEE(forged) != want {
		t.Fatal("could not forge")
	}
	s := post(receiver(), forged) // restarted receiver
	if eff := e.effect(t, idA); s != http.StatusUnauthorized || eff.State != ledger.StateIndeterminate {
		t.Fatalf("an altered body with the genuine CRC32 and signature, after a restart: %d, effect A %s by %s (ref %s)",
			s, eff.State, eff.ResolvedBy, eff.VendorReference)
	}
}

// TestATrickledBodyDoesNotHoldTheListener: an unauthenticated client
// that trickles a body is cut off after the handler's body deadline
// (DefaultBodyTimeout), even on a server with no ReadTimeout of its own;
// and a body that arrived in time is not cut off by that deadline (nor a
// short server ReadTimeout) during the hold: the event is still settled.
func TestATrickledBodyDoesNotHoldTheListener(t *testing.T) {
	e := newEnv(t)
	srv := &http.Server{Handler: webhooks.New(e.eng, webhooks.Options{Receivers: map[string]vendors.Receiver{"stripe": &stripe.Webhook{Secrets: []string{stripeSecret}}}}),
		ReadHeaderTimeout: 200 * time.Millisecond}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{"))
	start := time.Now()
	for range 6 {
		time.Sleep(400 * time.Millisecond)
		conn.Write([]byte(" "))
	}
	conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("after %v (%d× the header timeout) the trickled request is still being read", time.Since(start).Round(time.Millisecond),
			int(time.Since(start)/(200*time.Millisecond)))
	}
}

// TestTheBodyDeadlineEndsWithTheBody: a server with a ReadTimeout shorter
// than the hold; the body arrives at once, and the event is still read,
// held and looked up (its request context is not cancelled when the read
// deadline passes during the hold).
func TestTheBodyDeadlineEndsWithTheBody(t *testing.T) {
	e := newEnv(t)
	obs := &counts{}
	srv := httptest.NewUnstartedServer(webhooks.New(e.eng, webhooks.Options{Receivers: map[string]vendors.Receiver{"stripe": &stripe.Webhook{Secrets: []string{stripeSecret}}},
		Hold: 600 * time.Millisecond, BodyTimeout: 200 * time.Millisecond, Observer: obs}))
	srv.Config.ReadTimeout = 200 * time.Millisecond
	srv.Start()
	defer srv.Close()
	c := vendorCases()[0]
	h, b := c.event(t, e, "0f8fad5b-d9cb-869f-a165-70867728950e", true, good)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+webhooks.PathPrefix+"stripe", bytes.NewReader(b))
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || obs.get("stripe", "unknown") != 1 {
		t.Fatalf("an event held past the read deadline: %d %v", resp.StatusCode, obs.n)
	}
}

// TestAStripeEventOfTheOtherModeSettlesNothing: with the endpoint's mode
// configured (Stripe.Livemode), a verified test-mode event naming a live
// effect's key is ignored; the same event for a test-mode receiver
// settles it.
func TestAStripeEventOfTheOtherModeSettlesNothing(t *testing.T) {
	e := newEnv(t)
	c := vendorCases()[0]
	id, tag := hung(t, e, c, "stripe:mode")
	h, b := c.event(t, e, tag, false, good) // livemode false
	for _, live := range []bool{true, false} {
		rv := webhooks.New(e.eng, webhooks.Options{Receivers: map[string]vendors.Receiver{"stripe": &stripe.Webhook{Secrets: []string{stripeSecret}, Livemode: &live}}, Hold: -1})
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, webhooks.PathPrefix+"stripe", bytes.NewReader(b))
		req.Header = h.Clone()
		rv.ServeHTTP(rec, req)
		want := map[bool]ledger.State{true: ledger.StateIndeterminate, false: ledger.StateFailed}[live]
		if eff := e.effect(t, id); rec.Code != http.StatusOK || eff.State != want {
			t.Fatalf("a test-mode event at a receiver with livemode %v: %d, effect %s", live, rec.Code, eff.State)
		}
	}
}

// TestAPayPalTransmissionIdTheLedgerCannotKeepIsRefused: PayPal's
// receiver binds each transmission id to its body in the ledger, through
// the adapter's store; a genuinely signed delivery whose id is longer
// than the ledger's ids (or not text) cannot be bound and is refused
// (401), while one of the longest id the ledger keeps is accepted.
func TestAPayPalTransmissionIdTheLedgerCannotKeepIsRefused(t *testing.T) {
	e := newEnv(t)
	key, cert := paypalCert(t)
	h := webhooks.New(e.eng, webhooks.Options{Hold: -1,
		Receivers: map[string]vendors.Receiver{"paypal": &paypal.Webhook{WebhookID: paypalWebhookID, Certs: []*x509.Certificate{cert}}}})
	body := fixture(t, "paypal_payment_capture_completed.json", "__TAG__", "not-a-ratchet-order-0000000000000000")
	post := func(id string) int {
		when := time.Now().UTC().Format(time.RFC3339)
		digest := sha256.Sum256([]byte(paypal.Signed(id, when, paypalWebhookID, body)))
		sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest[:])
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, webhooks.PathPrefix+"paypal", bytes.NewReader(body))
		req.Header = http.Header{"Paypal-Transmission-Id": {id}, "Paypal-Transmission-Time": {when}, "Content-Type": {"application/json"},
			"Paypal-Transmission-Sig": {base64.StdEncoding.EncodeToString(sig)}, "Paypal-Auth-Algo": {"SHA256withRSA"}}
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if got := post(strings.Repeat("a", ledger.MaxIDLen+1)); got != http.StatusUnauthorized {
		t.Errorf("an id longer than the ledger's: %d, want 401", got)
	}
	if got := post("id-with-a-\x7f-control"); got != http.StatusUnauthorized {
		t.Errorf("an id that is not text: %d, want 401", got)
	}
	if got := post(strings.Repeat("b", ledger.MaxIDLen)); got != http.StatusOK {
		t.Errorf("an id of the ledger's longest: %d, want 200", got)
	}
}
