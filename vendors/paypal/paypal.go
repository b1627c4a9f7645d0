// Package paypal is what Ratchet knows about PayPal: where it takes an
// idempotency key, which requests are effects and what they cost, how its
// answers read, its error shape, what the adapters ask of it, and how its
// signed webhooks verify and read (webhook.go).
package paypal

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/ratchet-mcp/ratchet/vendors"
)

// Vendor is PayPal: the PayPal REST API (api-m.paypal.com; Orders v2, Payments v2).
//
// Sources: https://developer.paypal.com/reference/guidelines/idempotency —
// header PayPal-Request-Id, "PayPal returns the latest status of the
// previous request that used that same header", retry 5xx and timeouts
// with the same id; https://developer.paypal.com/api/orders/v2/orders-create
// — 1 to 108 characters, "The server stores keys for 6 hours". Amounts
// are decimal strings with a currency_code
// (https://developer.paypal.com/api/orders/v2/definitions/purchase_unit);
// errors are {name, message, debug_id, details}. A platform acts for
// another merchant with PayPal-Auth-Assertion
// (https://developer.paypal.com/api/rest/requests/), which scopes keys;
// HTTP Basic client credentials (static) scope them too. The OAuth bearer
// token, refreshed every few hours and opaque (the app's client id is in
// the Basic credentials that fetched it, not in the token), never scopes:
// with no assertion it is the Owner of the call's answer, so a retry with
// a refreshed token still finds a blocked or in-flight call (never sent
// twice), while a stored answer is replayed only to the token that made
// the call and another app's token makes its own call. A first-party
// caller that wants a succeeded call replayed across a refresh sends
// Basic credentials or a PayPal-Auth-Assertion naming itself. A repeated
// PayPal-Auth-Assertion, Authorization or PayPal-Request-Id header, and a
// body with a duplicate key, are refused. The server SDK parses an error body only
// for 400, 401 and 422, so refusals come as 422 (PayPal's own status for a
// request it will not process), a conflict with PayPal's
// PAYPAL_REQUEST_ID_PREVIOUSLY_USED.
type Vendor struct{}

var _ vendors.Vendor = Vendor{}

// Name implements Vendor.
func (Vendor) Name() string { return "paypal" }

// Hosts implements Vendor.
func (Vendor) Hosts() []string { return []string{"api-m.paypal.com", "api-m.sandbox.paypal.com"} }

// KeyRule implements Vendor.
func (Vendor) KeyRule() vendors.KeyRule {
	return vendors.KeyRule{Location: vendors.InHeader, Name: "PayPal-Request-Id", MaxLen: 108, Enforced: true, RetentionHours: 6, PerEndpoint: true}
}

// Classify implements Vendor.
func (p Vendor) Classify(r *vendors.Request) (vendors.Effect, bool) {
	return vendors.Typed(p.classify(r))
}

func (p Vendor) classify(r *vendors.Request) (vendors.Effect, bool) {
	parts := vendors.Segments(r.Path)
	if !vendors.Mutating(r.Method) || len(parts) < 3 || (parts[0] != "v1" && parts[0] != "v2") ||
		parts[1] == "oauth2" || parts[1] == "identity" { // token requests only read
		return vendors.Effect{}, false
	}
	body := vendors.JSONObject(r.Body)
	e := vendors.Effect{Key: p.KeyRule(), CallerKey: r.Header.Get("PayPal-Request-Id"),
		Refuse: vendors.SingleHeaders(r.Header, "PayPal-Auth-Assertion", "Authorization", "PayPal-Request-Id")}
	if e.Refuse == "" {
		e.Refuse = vendors.StrictJSON(r.Body)
	}
	switch a := vendors.ScopeOf(r.Header, "PayPal-Auth-Assertion"); {
	case strings.HasPrefix(a, "\n"): // repeated (refused): every value
		e.Scope = a
	case a != "":
		e.Scope = "auth_assertion=" + a
	}
	switch a := r.Header.Get("Authorization"); {
	case vendors.IsBasic(a):
		e.Credential = a
	case e.Scope == "":
		// A first-party call with an OAuth token: nothing else says
		// whose call it is, and the token is opaque and refreshed.
		e.Owner = a
	}
	// /v2/checkout/orders, /v2/payments/captures/{id}/refund: the second
	// segment is a namespace.
	res := append([]string{parts[1] + "_" + parts[2]}, parts[3:]...)
	e.Operation = vendors.RestType("paypal", r.Method, res)
	var refuse string
	switch {
	case r.Method == http.MethodPost && len(parts) == 3 && parts[1] == "checkout" && parts[2] == "orders":
		e.Operation = "paypal.orders.create"
		e.Money, refuse = paypalOrderMoney(body)
		e.Counterparty = vendors.FirstString(body, []string{"purchase_units", "0", "payee", "merchant_id"},
			[]string{"purchase_units", "0", "payee", "email_address"})
	case r.Method == http.MethodPost && len(parts) == 5 && parts[1] == "checkout" && parts[2] == "orders":
		e.Operation = "paypal.orders." + vendors.Part(parts[4])
	case r.Method == http.MethodPost && len(parts) == 5 && parts[1] == "payments":
		e.Operation = "paypal." + vendors.Part(strings.TrimSuffix(parts[2], "s")) + "s." + vendors.Part(parts[4])
		e.Money, refuse = paypalMoney(vendors.Get(body, "amount"))
	}
	e.RefuseFor(refuse)
	return e, true
}

// paypalMoney reads {"currency_code": "USD", "value": "10.00"}, and why
// the request is refused when the value is there but unreadable.
func paypalMoney(v any) (*vendors.Money, string) {
	return vendors.DecimalAmount(v, "value", "currency_code")
}

// paypalOrderMoney sums the amounts of an order's purchase units: PayPal
// takes up to ten, each a purchase the buyer pays for.
func paypalOrderMoney(body any) (*vendors.Money, string) {
	units, _ := vendors.Get(body, "purchase_units").([]any)
	var total *vendors.Money
	for i, u := range units {
		m, refuse := paypalMoney(vendors.Get(u, "amount"))
		if refuse == "" {
			total, refuse = vendors.AddMoney(total, m, "purchase_units."+strconv.Itoa(i)+".amount")
		}
		if refuse != "" {
			return nil, refuse
		}
	}
	return total, ""
}

// outcomeFields are what Outcome reads of an answer: the object's id, the
// error's name and its first detail's issue.
var outcomeFields = [][]string{{"id"}, {"name"}, {"details", "0", "issue"}}

// Outcome implements Vendor.
func (Vendor) Outcome(r *vendors.Response) vendors.Outcome {
	body := vendors.ReadFields(r.Body, outcomeFields...)
	o := vendors.Outcome{Result: vendors.ByStatus(r.Status), VendorReference: body.Str(0)}
	if o.Result != vendors.Succeeded {
		o.Reason = strings.Trim(body.Str(1)+" "+body.Str(2), " ")
	}
	return o
}

// Refusal implements Vendor: PayPal's {name, message, details}, at a status
// whose body the server SDK reads (400, 401, 422; other refusals 422).
func (Vendor) Refusal(status int, code, message string) vendors.Reply {
	name, issue := strings.ToUpper(code), strings.ToUpper(code)
	if code == vendors.RefusalConflict {
		status, name, issue = http.StatusUnprocessableEntity, "UNPROCESSABLE_ENTITY", "PAYPAL_REQUEST_ID_PREVIOUSLY_USED"
	}
	if status >= 400 && status < 500 && status != http.StatusBadRequest && status != http.StatusUnauthorized {
		status = http.StatusUnprocessableEntity
	}
	return vendors.Reply{Status: status, Body: vendors.ErrorJSON(map[string]any{"name": name, "message": message, "debug_id": "ratchet",
		"details": []any{map[string]any{"issue": issue, "description": message}}})}
}

// Tag implements Tagger: purchase_units[0].custom_id (at most 127
// characters) of an order with one purchase unit, which PayPal echoes in
// a capture's resource.custom_id; several units would make it ambiguous,
// and a caller's own custom_id stays (tag.go).
func (Vendor) Tag(e vendors.Effect, body []byte, key string) ([]byte, error) {
	if e.Operation != "paypal.orders.create" {
		return body, nil
	}
	top, ok := vendors.ScanObject(body, 0)
	if !ok {
		return body, nil
	}
	pu, has := top.Members["purchase_units"]
	if !has {
		return body, nil
	}
	elems, ok := vendors.ScanArray(body, pu.Start)
	if !ok || len(elems) != 1 {
		return body, nil
	}
	val, _ := json.Marshal(key)
	return vendors.AddMember(body, []int{elems[0]}, "custom_id", val), nil
}

// StoredFailure implements Recoverable: never. PayPal documents no replay
// of a failure and "might fail the second request"
// (https://developer.paypal.com/reference/guidelines/idempotency).
func (Vendor) StoredFailure(*vendors.Response) bool { return false }

// RequestIDHeader implements Recoverable.
func (Vendor) RequestIDHeader() string { return "Paypal-Debug-Id" }
