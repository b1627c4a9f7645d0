// Package checkout is what Ratchet knows about Checkout.com: where it takes an
// idempotency key, which requests are effects and what they cost, how its
// answers read, its error shape, what the adapters ask of it, and how its
// signed webhooks verify and read (webhook.go).
package checkout

import (
	"net/http"
	"strings"

	"github.com/ratchet-mcp/ratchet/vendors"
)

// Vendor is Checkout.com's unified payments API (api.checkout.com).
//
// Sources: https://www.checkout.com/docs/payments/manage-payments/idempotency
// — header Cko-Idempotency-Key on /payments, captures, refunds, voids and
// /transfers; keys kept 24 hours; a request in progress with the same key
// answers 409 ("wait at least 30 seconds"); only 2xx answers are saved, and
// a 4xx is not executed. No length limit is published (MaxLen 0).
// https://www.checkout.com/docs/payments/accept-payments/format-the-amount-value
// — amount is an integer in minor units. A 201 with "approved": false is a
// declined payment. Errors are {request_id, error_type, error_codes}.
// processing_channel_id selects the merchant's entity and scopes keys; a
// secret key (sk_…, "Bearer" in any case, or bare) scopes them too, channel
// or not: it is static, and another account's key naming the same channel
// is another caller. An OAuth access token (refreshed) never scopes; with
// no channel it is the Owner of the call's answer (see PayPal). A
// repeated Authorization or Cko-Idempotency-Key header, and a body with a
// duplicate key, are refused. checkout-sdk-node keeps an error's body only for 422, 429 and
// statuses it does not name (it drops it for 401, 403, 404, 409 and 502),
// so refusals come as 422, in_flight as 429 (Checkout.com's earlier status
// for a request in progress) and an unknown outcome as 504.
type Vendor struct{}

var _ vendors.Vendor = Vendor{}

// Name implements Vendor.
func (Vendor) Name() string { return "checkout" }

// Hosts implements Vendor.
func (Vendor) Hosts() []string { return []string{"api.checkout.com", "api.sandbox.checkout.com"} }

// KeyRule implements Vendor.
func (Vendor) KeyRule() vendors.KeyRule {
	return vendors.KeyRule{Location: vendors.InHeader, Name: "Cko-Idempotency-Key", Enforced: true, RetentionHours: 24, PerEndpoint: true}
}

// Classify implements Vendor.
func (c Vendor) Classify(r *vendors.Request) (vendors.Effect, bool) {
	return vendors.Typed(c.classify(r))
}

func (c Vendor) classify(r *vendors.Request) (vendors.Effect, bool) {
	parts := vendors.Segments(r.Path)
	if !vendors.Mutating(r.Method) || len(parts) == 0 {
		return vendors.Effect{}, false
	}
	body := vendors.JSONObject(r.Body)
	e := vendors.Effect{Operation: vendors.RestType("checkout", r.Method, parts), CallerKey: r.Header.Get("Cko-Idempotency-Key"),
		Counterparty: vendors.FirstString(body, []string{"customer", "id"}, []string{"customer", "email"}, []string{"destination", "id"}),
	}
	money, refuse := vendors.MinorAmount(body, []string{"amount"}, []string{"currency"})
	e.Money = money
	e.Refuse = vendors.SingleHeaders(r.Header, "Authorization", "Cko-Idempotency-Key")
	if e.Refuse == "" {
		e.Refuse = vendors.StrictJSON(r.Body)
	}
	e.RefuseFor(refuse)
	if pc := vendors.Str(body, "processing_channel_id"); pc != "" {
		e.Merchant = "processing_channel_id=" + pc
	}
	switch a := r.Header.Get("Authorization"); {
	case checkoutSecretKey(a):
		e.Credential = a
	case e.Merchant == "":
		e.Owner = a // an OAuth token, and no channel says whose call it is
	}
	switch {
	case r.Method == http.MethodPost && len(parts) == 1 && (parts[0] == "payments" || parts[0] == "transfers"):
		e.Key = c.KeyRule()
	case r.Method == http.MethodPost && len(parts) == 3 && parts[0] == "payments":
		// captures, refunds, voids: the action, not a nested collection.
		e.Key = c.KeyRule()
		e.Operation = "checkout.payments." + strings.TrimSuffix(vendors.Part(parts[2]), "s")
	}
	return e, true
}

// checkoutSecretKey reports whether an Authorization header carries a
// secret key (sk_…, sandbox sk_sbox_…): "Bearer sk_…" with the scheme in
// any case (RFC 9110 11.1), or the bare key previous accounts send.
func checkoutSecretKey(a string) bool {
	if t, ok := vendors.BearerToken(a); ok {
		return strings.HasPrefix(t, "sk_")
	}
	return strings.HasPrefix(strings.TrimSpace(a), "sk_")
}

// outcomeFields are what Outcome reads of an answer.
var outcomeFields = [][]string{{"id"}, {"action_id"}, {"approved"}, {"response_summary"}, {"error_type"}}

// Outcome implements Vendor.
func (Vendor) Outcome(r *vendors.Response) vendors.Outcome {
	body := vendors.ReadFields(r.Body, outcomeFields...)
	o := vendors.Outcome{Result: vendors.ByStatus(r.Status), VendorReference: body.First(0, 1)}
	switch approved, ok := body.Bool(2); {
	case o.Result == vendors.Succeeded && ok && !approved:
		o.Result, o.Reason = vendors.Failed, "declined: "+body.Str(3)
	case o.Result != vendors.Succeeded:
		o.Reason = body.Str(4)
	}
	return o
}

// Refusal implements Vendor: Checkout.com's error object, at a status whose
// body checkout-sdk-node keeps.
func (Vendor) Refusal(status int, code, message string) vendors.Reply {
	errType := code
	switch {
	case code == vendors.RefusalInFlight:
		status = http.StatusTooManyRequests
	case code == vendors.RefusalConflict:
		status, errType = http.StatusUnprocessableEntity, "request_invalid"
	case status == http.StatusForbidden, status == http.StatusConflict, status == http.StatusUnauthorized, status == http.StatusNotFound:
		status = http.StatusUnprocessableEntity
	case status == http.StatusBadGateway:
		status = http.StatusGatewayTimeout
	}
	return vendors.Reply{Status: status, Body: vendors.ErrorJSON(map[string]any{"request_id": "ratchet", "error_type": errType, "error_codes": []string{message}})}
}

// Tag implements Tagger: metadata.ratchet_key of a payment, which
// Checkout.com echoes in data.metadata.ratchet_key (tag.go).
func (Vendor) Tag(e vendors.Effect, body []byte, key string) ([]byte, error) {
	if e.Operation != "checkout.payments.create" {
		return body, nil
	}
	return vendors.TagMetadata(body, key)
}

// StoredFailure implements Recoverable. Checkout.com caches a key's answer
// "if the request returns a 2xx response code"; a 4xx or 5xx is not saved
// "and the payment is reattempted"
// (https://www.checkout.com/docs/payments/manage-payments/idempotency).
// So only a 2xx decline (approved false) is the key's result.
func (Vendor) StoredFailure(r *vendors.Response) bool { return r.Status >= 200 && r.Status < 300 }

// RequestIDHeader implements Recoverable.
func (Vendor) RequestIDHeader() string { return "Cko-Request-Id" }
