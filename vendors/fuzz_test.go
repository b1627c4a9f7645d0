package vendors_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/adyen"
	"github.com/ratchet-mcp/ratchet/vendors/checkout"
	"github.com/ratchet-mcp/ratchet/vendors/paypal"
	"github.com/ratchet-mcp/ratchet/vendors/square"
	"github.com/ratchet-mcp/ratchet/vendors/stripe"
)

// FuzzStripeForm classifies arbitrary form bodies: never a panic, and a
// declared amount is never negative.
func FuzzStripeForm(f *testing.F) {
	for _, s := range []string{"amount=2000&currency=usd&customer=cus_1", "amount=-1&currency=usd", "amount=99999999999999999999&currency=usd",
		"transfer_data[destination]=acct_1&amount=1&currency=eur", "%zz", "amount=1&amount=2&currency=usd&currency=jpy", ""} {
		f.Add("/v1/payment_intents", []byte(s))
	}
	f.Add("/v2/money_management/outbound_payments", []byte(`{"amount":{"value":100,"currency":"usd"},"to":{"recipient":"acct_1"}}`))
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		e, ok := stripe.Vendor{}.Classify(&vendors.Request{Method: http.MethodPost, Path: path, Header: http.Header{}, Body: body})
		if ok && e.Money != nil && e.Money.Minor < 0 {
			t.Fatalf("negative amount %+v", e.Money)
		}
		if ok && !effectTypeOK(e.EffectType) {
			t.Fatalf("bad effect type %q", e.EffectType)
		}
	})
}

// FuzzJSONBody classifies and stamps arbitrary JSON bodies for the JSON
// vendors: never a panic; a successful stamp yields valid JSON whose key
// field holds the stamped key.
func FuzzJSONBody(f *testing.F) {
	for _, s := range []string{`{"amount_money":{"amount":1000,"currency":"USD"},"idempotency_key":"x"}`, `{}`, `[]`, `{"a":`,
		`{"amount":{"value":1e99,"currency":"EUR"}}`, `{"purchase_units":[{"amount":{"value":"1.00","currency_code":"USD"}}]}`,
		`{"idempotency_key":1}`, `{"x":"\u0000"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, v := range []vendors.Vendor{square.Vendor{}, adyen.Vendor{}, paypal.Vendor{}, checkout.Vendor{}} {
			for _, p := range []string{"/v2/payments", "/v71/payments", "/v2/checkout/orders", "/payments"} {
				e, ok := v.Classify(&vendors.Request{Method: http.MethodPost, Path: p, Header: http.Header{}, Body: []byte(body)})
				if ok && (e.Money != nil && e.Money.Minor < 0 || !effectTypeOK(e.EffectType)) {
					t.Fatalf("%s %s: %+v", v.Name(), p, e)
				}
			}
		}
		out, err := vendors.Stamp(square.Vendor{}.KeyRule(), http.Header{}, []byte(body), "k-1")
		if err != nil {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("stamped body is not JSON: %s", out)
		}
		if !bytes.Equal(m["idempotency_key"], []byte(`"k-1"`)) {
			t.Fatalf("key not stamped: %s", out)
		}
	})
}

// FuzzParseDecimal: never a panic; accepted amounts are non-negative.
func FuzzParseDecimal(f *testing.F) {
	for _, s := range []string{"100.00", "0.5", "1e3", "-1", "", ".", "99999999999999999999", "1.234"} {
		f.Add(s, "USD")
	}
	f.Add("1.234", "KWD")
	f.Add("15", "JPY")
	f.Fuzz(func(t *testing.T, s, cur string) {
		m, err := vendors.ParseDecimal(s, cur)
		if err == nil && m.Minor < 0 {
			t.Fatalf("%q: negative %d", s, m.Minor)
		}
	})
}

// effectTypeOK mirrors the ledger's effect type rule, so every type the
// vendors produce can be begun.
func effectTypeOK(s string) bool {
	parts := bytes.Split([]byte(s), []byte("."))
	if len(parts) < 2 || len(parts) > 6 || len(s) > 128 {
		return false
	}
	for _, p := range parts {
		if len(p) == 0 || p[0] == '_' || p[0] == '-' {
			return false
		}
		for _, c := range p {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' {
				return false
			}
		}
	}
	return true
}
