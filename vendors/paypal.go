package vendors

import (
	"net/http"
	"strings"
)

// PayPal is the PayPal REST API (api-m.paypal.com; Orders v2, Payments v2).
//
// Sources: https://developer.paypal.com/reference/guidelines/idempotency —
// header PayPal-Request-Id, "PayPal returns the latest status of the
// previous request that used that same header", retry 5xx and timeouts
// with the same id; https://developer.paypal.com/api/orders/v2/orders-create
// — 1 to 108 characters, "The server stores keys for 6 hours". Amounts
// are decimal strings with a currency_code
// (https://developer.paypal.com/api/orders/v2/definitions/purchase_unit);
// errors are {name, message, debug_id, details}.
type PayPal struct{}

var _ Vendor = PayPal{}

// Name implements Vendor.
func (PayPal) Name() string { return "paypal" }

// Hosts implements Vendor.
func (PayPal) Hosts() []string { return []string{"api-m.paypal.com", "api-m.sandbox.paypal.com"} }

// KeyRule implements Vendor.
func (PayPal) KeyRule() KeyRule {
	return KeyRule{Location: InHeader, Name: "PayPal-Request-Id", MaxLen: 108, Enforced: true, RetentionHours: 6}
}

// Classify implements Vendor.
func (p PayPal) Classify(r *Request) (Effect, bool) {
	parts := segments(r.Path)
	if !mutating(r.Method) || len(parts) < 3 || (parts[0] != "v1" && parts[0] != "v2") ||
		parts[1] == "oauth2" || parts[1] == "identity" { // token requests only read
		return Effect{}, false
	}
	body := jsonObject(r.Body)
	e := Effect{Key: p.KeyRule(), CallerKey: r.Header.Get("PayPal-Request-Id")}
	// /v2/checkout/orders, /v2/payments/captures/{id}/refund: the second
	// segment is a namespace.
	res := append([]string{parts[1] + "_" + parts[2]}, parts[3:]...)
	e.EffectType = restType("paypal", r.Method, res)
	switch {
	case r.Method == http.MethodPost && len(parts) == 3 && parts[1] == "checkout" && parts[2] == "orders":
		e.EffectType = "paypal.orders.create"
		e.Money = paypalMoney(get(body, "purchase_units", "0", "amount"))
		e.Counterparty = firstString(body, []string{"purchase_units", "0", "payee", "merchant_id"},
			[]string{"purchase_units", "0", "payee", "email_address"})
	case r.Method == http.MethodPost && len(parts) == 5 && parts[1] == "checkout" && parts[2] == "orders":
		e.EffectType = "paypal.orders." + part(parts[4])
	case r.Method == http.MethodPost && len(parts) == 5 && parts[1] == "payments":
		e.EffectType = "paypal." + part(strings.TrimSuffix(parts[2], "s")) + "s." + part(parts[4])
		e.Money = paypalMoney(get(body, "amount"))
	}
	return e, true
}

// paypalMoney reads {"currency_code": "USD", "value": "10.00"}.
func paypalMoney(v any) *Money {
	m, err := ParseDecimal(str(v, "value"), str(v, "currency_code"))
	if err != nil || len(m.Currency) != 3 {
		return nil
	}
	return &m
}

// Outcome implements Vendor.
func (PayPal) Outcome(r *Response) Outcome {
	body := jsonObject(r.Body)
	o := Outcome{Result: byStatus(r.Status), VendorReference: str(body, "id")}
	if o.Result != Succeeded {
		o.Reason = strings.Trim(str(body, "name")+" "+str(body, "details", "0", "issue"), " ")
	}
	return o
}

// ErrorBody implements Vendor: PayPal's {name, message, details}.
func (PayPal) ErrorBody(_ int, code, message string) []byte {
	return errorJSON(map[string]any{"name": strings.ToUpper(code), "message": message,
		"details": []any{map[string]any{"issue": strings.ToUpper(code), "description": message}}})
}
