package proxy

import (
	"testing"

	"github.com/ratchet-mcp/ratchet/vendors"
)

func TestTheWebhookTagFillsOnlyWhatTheCallerLeftEmpty(t *testing.T) {
	const key = "0f8fad5b-d9cb-869f-a165-70867728950e"
	for _, c := range []struct{ name, typ, body, want string }{
		{"square: added", "square.payments.create", `{"idempotency_key":"k","amount_money":{"amount":1,"currency":"USD"}}`,
			`{"reference_id":"` + key + `","idempotency_key":"k","amount_money":{"amount":1,"currency":"USD"}}`},
		{"square: the caller's reference stays", "square.payments.create", `{"reference_id":"order-7"}`, `{"reference_id":"order-7"}`},
		{"square: an empty object", "square.payments.create", ` { } `, ` {"reference_id":"` + key + `" } `},
		{"adyen: no metadata", "adyen.payments.create", `{"reference":"r"}`, `{"metadata":{"ratchet_key":"` + key + `"},"reference":"r"}`},
		{"checkout: metadata of the caller's", "checkout.payments.create", `{"metadata": {"coupon":"NY"}, "amount":1}`,
			`{"metadata": {"ratchet_key":"` + key + `","coupon":"NY"}, "amount":1}`},
		{"checkout: metadata null", "checkout.payments.create", `{"metadata":null}`, `{"metadata":null}`},
		{"checkout: ratchet_key there", "checkout.payments.create", `{"metadata":{"ratchet_key":"x"}}`, `{"metadata":{"ratchet_key":"x"}}`},
		{"paypal: one unit", "paypal.orders.create", `{"intent":"CAPTURE","purchase_units":[{"amount":{"value":"1.00"}}]}`,
			`{"intent":"CAPTURE","purchase_units":[{"custom_id":"` + key + `","amount":{"value":"1.00"}}]}`},
		{"paypal: two units", "paypal.orders.create", `{"purchase_units":[{},{}]}`, `{"purchase_units":[{},{}]}`},
		{"paypal: the caller's custom_id", "paypal.orders.create", `{"purchase_units":[{"custom_id":"c"}]}`, `{"purchase_units":[{"custom_id":"c"}]}`},
		{"not JSON", "adyen.payments.create", `amount=1`, `amount=1`},
		{"a repeated member", "square.payments.create", `{"a":1,"a":2}`, `{"a":1,"a":2}`},
		{"another request", "stripe.payment_intents.create", `{}`, `{}`},
		{"a refund", "checkout.payments.refund", `{}`, `{}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := string(tagForWebhooks(vendors.Effect{EffectType: c.typ}, []byte(c.body), key))
			if got != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}
