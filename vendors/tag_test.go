package vendors_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/all"
)

// tagFor is what the proxy does: the vendor of the operation tags the
// request when it is a Tagger.
func tagFor(e vendors.Effect, body []byte, key string) ([]byte, error) {
	name, _, _ := strings.Cut(e.Operation, ".")
	v, _ := all.Lookup(name)
	if tg, ok := v.(vendors.Tagger); ok {
		return tg.Tag(e, body, key)
	}
	return body, nil
}

// TestTheWebhookTagFillsOnlyWhatTheCallerLeftEmpty: the shared fields
// (Square reference_id, PayPal custom_id) are the caller's when filled;
// Ratchet's own metadata.ratchet_key is always the request's vendor key,
// and a body that names another, or in which Ratchet cannot tell, is
// refused (ErrForeignTag).
func TestTheWebhookTagFillsOnlyWhatTheCallerLeftEmpty(t *testing.T) {
	const key, refused = "0f8fad5b-d9cb-869f-a165-70867728950e", "(refused)"
	for _, c := range []struct{ name, typ, body, want string }{
		{"square: added", "square.payments.create", `{"idempotency_key":"k","amount_money":{"amount":1,"currency":"USD"}}`,
			`{"reference_id":"` + key + `","idempotency_key":"k","amount_money":{"amount":1,"currency":"USD"}}`},
		{"square: the caller's reference stays", "square.payments.create", `{"reference_id":"order-7"}`, `{"reference_id":"order-7"}`},
		{"square: an empty object", "square.payments.create", ` { } `, ` {"reference_id":"` + key + `" } `},
		{"adyen: no metadata", "adyen.payments.create", `{"reference":"r"}`, `{"metadata":{"ratchet_key":"` + key + `"},"reference":"r"}`},
		{"checkout: metadata of the caller's", "checkout.payments.create", `{"metadata": {"coupon":"NY"}, "amount":1}`,
			`{"metadata": {"ratchet_key":"` + key + `","coupon":"NY"}, "amount":1}`},
		{"checkout: metadata null", "checkout.payments.create", `{"metadata":null}`, `{"metadata":null}`},
		{"checkout: this request's own key there", "checkout.payments.create", `{"metadata":{"ratchet_key":"` + key + `"}}`,
			`{"metadata":{"ratchet_key":"` + key + `"}}`},
		{"checkout: another key there", "checkout.payments.create", `{"metadata":{"ratchet_key":"x"}}`, refused},
		{"adyen: another key there, escaped", "adyen.payments.create", `{"metadata":{"ratchet\u005fkey":"x"}}`, refused},
		{"adyen: ratchet_key twice", "adyen.payments.create", `{"metadata":{"ratchet_key":"` + key + `","ratchet_key":"x"}}`, refused},
		{"checkout: metadata twice", "checkout.payments.create", `{"metadata":{},"metadata":{"ratchet_key":"x"}}`, refused},
		{"checkout: Metadata in another case", "checkout.payments.create", `{"Metadata":{"ratchet_key":"x"}}`, refused},
		{"checkout: metadata not an object", "checkout.payments.create", `{"metadata":"x"}`, refused},
		{"paypal: one unit", "paypal.orders.create", `{"intent":"CAPTURE","purchase_units":[{"amount":{"value":"1.00"}}]}`,
			`{"intent":"CAPTURE","purchase_units":[{"custom_id":"` + key + `","amount":{"value":"1.00"}}]}`},
		{"paypal: two units", "paypal.orders.create", `{"purchase_units":[{},{}]}`, `{"purchase_units":[{},{}]}`},
		{"paypal: the caller's custom_id", "paypal.orders.create", `{"purchase_units":[{"custom_id":"c"}]}`, `{"purchase_units":[{"custom_id":"c"}]}`},
		{"not JSON", "adyen.payments.create", `amount=1`, refused},
		{"paypal: not JSON", "paypal.orders.create", `x`, `x`},
		{"a repeated member", "square.payments.create", `{"a":1,"a":2}`, `{"a":1,"a":2}`},
		{"another request", "stripe.payment_intents.create", `{}`, `{}`},
		{"a refund", "checkout.payments.refund", `{}`, `{}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := tagFor(vendors.Effect{Operation: c.typ}, []byte(c.body), key)
			got := string(b)
			if errors.Is(err, vendors.ErrForeignTag) {
				got = refused
			}
			if got != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}
