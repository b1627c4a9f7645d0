package vendors_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	stripego "github.com/stripe/stripe-go/v79"

	"github.com/ratchet-mcp/ratchet/internal/stripemock"
	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/all"
	"github.com/ratchet-mcp/ratchet/vendors/stripe"
)

// TestStripeFixturesThroughStripeMock sends the documented request fixtures
// to stripe-mock (Stripe's own OpenAPI-validated mock), stamped as the proxy
// would, and classifies what comes back: the request shapes are ones Stripe
// accepts, the key lands in the header Stripe reads (stripe-mock echoes it),
// and the real response shapes classify as expected.
func TestStripeFixturesThroughStripeMock(t *testing.T) {
	base := stripemock.Start(t)
	send := func(path string, body []byte, key string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk_test_123")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		e, ok := stripe.Vendor{}.Classify(&vendors.Request{Method: req.Method, Path: path, Header: req.Header, Body: body})
		if !ok {
			t.Fatalf("%s is not an effect", path)
		}
		if _, err := vendors.Stamp(e.Key, req.Header, body, key); err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	for _, c := range []struct{ path, fixture, Object, prefix string }{
		{"/v1/payment_intents", "payment_intent.create.req", "payment_intent", "pi_"},
		{"/v1/payment_intents", "destination.create.req", "payment_intent", "pi_"},
		{"/v1/charges", "jpy.create.req", "charge", "ch_"},
		{"/v1/refunds", "refund.create.req", "refund", "re_"},
	} {
		key := all.Registry().ShapeKey("stripe", []byte("0123456789abcdef0123456789abcdef")).Value
		resp, body := send(c.path, fixture(t, "stripe", c.fixture), key)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: stripe-mock answered %d: %s", c.fixture, resp.StatusCode, body)
		}
		if got := resp.Header.Get("Idempotency-Key"); got != key {
			t.Fatalf("%s: stripe-mock saw key %q, want %q", c.fixture, got, key)
		}
		o := stripe.Vendor{}.Outcome(&vendors.Response{Status: resp.StatusCode, Header: resp.Header, Body: body})
		var obj struct{ Object string }
		json.Unmarshal(body, &obj)
		if o.Result != vendors.Succeeded || !strings.HasPrefix(o.VendorReference, c.prefix) || obj.Object != c.Object {
			t.Fatalf("%s: outcome %+v for %s", c.fixture, o, body)
		}
	}
	// An invalid request: stripe-mock's real 400 classifies as failed.
	resp, body := send("/v1/payment_intents", []byte("currency=usd&amount=notanumber"), "k")
	o := stripe.Vendor{}.Outcome(&vendors.Response{Status: resp.StatusCode, Header: resp.Header, Body: body})
	if resp.StatusCode != 400 || o.Result != vendors.Failed || o.Reason == "" {
		t.Fatalf("invalid request: %d %+v %s", resp.StatusCode, o, body)
	}
	// Our refusal body has the shape of stripe-mock's own error body, and
	// stripe-go reads it as a *stripego.Error with the message.
	var mockErr, ours struct {
		Error *stripego.Error `json:"error"`
	}
	if err := json.Unmarshal(body, &mockErr); err != nil || mockErr.Error == nil || mockErr.Error.Msg == "" {
		t.Fatalf("stripe-mock error body: %v %s", err, body)
	}
	if err := json.Unmarshal(stripe.Vendor{}.Refusal(403, "ratchet_denied", "Ratchet denied this payment: budget exceeded").Body, &ours); err != nil {
		t.Fatal(err)
	}
	if ours.Error == nil || ours.Error.Msg != "Ratchet denied this payment: budget exceeded" || ours.Error.Type != stripego.ErrorTypeInvalidRequest || ours.Error.Code != "ratchet_denied" {
		t.Fatalf("our error as stripe-go sees it: %+v", ours.Error)
	}
}
