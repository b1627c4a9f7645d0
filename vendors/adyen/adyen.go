// Package adyen is what Ratchet knows about Adyen: where it takes an
// idempotency key, which requests are effects and what they cost, how its
// answers read, its error shape, what the adapters ask of it, and how its
// signed webhooks verify and read (webhook.go).
package adyen

import (
	"net/http"
	"regexp"
	"strings"

	"github.com/ratchet-mcp/ratchet/vendors"
)

// Vendor is Adyen: the Checkout API (checkout-test.adyen.com and the live
// endpoints, paths /v{N}/...). Live hosts carry a per-merchant prefix
// ({prefix}-checkout-live.adyenpayments.com), so only the test host is
// known here; the forward proxy intercepts a live host once the operator
// names it (proxy.intercept_hosts), and reverse mode needs nothing.
//
// Sources: https://docs.adyen.com/development-resources/api-idempotency —
// header idempotency-key on POST, at most 64 characters, kept "for a
// minimum period of 7 days after first submission"; a request already
// processed or in progress answers 409 or 422 with errorCode 704; the
// idempotency store being unavailable answers 503 with errorCode 703
// (nothing executed); a transient-error: true header means retry later.
// https://docs.adyen.com/development-resources/response-handling — 400,
// 401, 403 and 422 are refused requests; 500 may follow a bad request but
// is treated as ambiguous. A 200 is not a successful payment: resultCode
// Refused, Error and Cancelled are final refusals. Errors are the
// ServiceError object {status, errorCode, message, errorType, pspReference}
// (https://docs.adyen.com/development-resources/serviceexception).
// Keys are kept per company account; the body's merchantAccount says which
// merchant a call is for and scopes keys, and so does the API key (or
// Basic credentials): it is static, and another company's key naming the
// same merchant account is another caller, whom Adyen would refuse (a
// rotated key starts a new scope: resolve blocked proxy effects first). A
// repeated X-API-Key, Authorization or Idempotency-Key header, and a body
// with a duplicate key, are refused. The Node library shows the
// message of a body with a status field at any status.
type Vendor struct{}

var _ vendors.Vendor = Vendor{}

// Name implements Vendor.
func (Vendor) Name() string { return "adyen" }

// Hosts implements Vendor.
func (Vendor) Hosts() []string { return []string{"checkout-test.adyen.com"} }

// KeyRule implements Vendor.
func (Vendor) KeyRule() vendors.KeyRule {
	return vendors.KeyRule{Location: vendors.InHeader, Name: "idempotency-key", MaxLen: 64, Enforced: true, RetentionHours: 7 * 24, PerEndpoint: true}
}

var adyenVersion = regexp.MustCompile(`^v[0-9]+$`)

// adyenModifications maps the collections under payments/{pspReference}
// to actions.
var adyenModifications = map[string]string{
	"captures": "capture", "refunds": "refund", "cancels": "cancel", "reversals": "reverse",
	"amountUpdates": "amount_update", "technicalCancels": "technical_cancel",
}

// adyenReads are Checkout API POSTs that only read: the payment methods
// available, a gift card's balance, a card's brand.
var adyenReads = map[string]bool{"paymentMethods": true, "cardDetails": true, "originKeys": true}

// Classify implements Vendor.
func (a Vendor) Classify(r *vendors.Request) (vendors.Effect, bool) {
	return vendors.Typed(a.classify(r))
}

func (a Vendor) classify(r *vendors.Request) (vendors.Effect, bool) {
	parts := vendors.Segments(r.Path)
	if len(parts) > 0 && parts[0] == "checkout" { // live endpoints: /checkout/v71/...
		parts = parts[1:]
	}
	if r.Method != http.MethodPost || len(parts) < 2 || !adyenVersion.MatchString(parts[0]) {
		return vendors.Effect{}, false
	}
	parts = parts[1:]
	if adyenReads[parts[0]] {
		return vendors.Effect{}, false
	}
	body := vendors.JSONObject(r.Body)
	e := vendors.Effect{Key: a.KeyRule(), CallerKey: r.Header.Get("Idempotency-Key"),
		Counterparty: vendors.FirstString(body, []string{"shopperReference"}),
	}
	money, refuse := vendors.MinorAmount(body, []string{"amount", "value"}, []string{"amount", "currency"})
	e.Money = money
	e.Refuse = vendors.SingleHeaders(r.Header, "X-API-Key", "Authorization", "Idempotency-Key")
	if e.Refuse == "" {
		e.Refuse = vendors.StrictJSON(r.Body)
	}
	e.RefuseFor(refuse)
	if m := vendors.Str(body, "merchantAccount"); m != "" {
		e.Merchant = "merchantAccount=" + m
	}
	// The API key (or Basic credentials) always scopes: it does not
	// refresh, and another company's key naming the same merchant account
	// is another caller, whom Adyen would refuse. An OAuth token does not
	// scope; with no merchant account it owns the answer.
	switch k, a := r.Header.Get("X-API-Key"), r.Header.Get("Authorization"); {
	case k != "" || vendors.IsBasic(a):
		e.Credential = k + "\x00" + a
	case e.Merchant == "":
		e.Owner = a
	}
	switch {
	case len(parts) == 1 && parts[0] == "payments":
		e.Operation = "adyen.payments.create"
	case len(parts) == 3 && parts[0] == "payments" && adyenModifications[parts[2]] != "":
		e.Operation = "adyen.payments." + adyenModifications[parts[2]]
	case len(parts) == 2 && parts[0] == "payments" && parts[1] == "details":
		e.Operation = "adyen.payments.details"
	case len(parts) == 1 && parts[0] == "paymentLinks":
		e.Operation = "adyen.payment_links.create"
	default:
		e.Operation = vendors.RestType("adyen", r.Method, parts)
	}
	return e, true
}

// outcomeFields are what Outcome reads of an answer.
var outcomeFields = [][]string{{"pspReference"}, {"errorCode"}, {"resultCode"}, {"refusalReason"}, {"errorType"}}

// Outcome implements Vendor.
func (Vendor) Outcome(r *vendors.Response) vendors.Outcome {
	body := vendors.ReadFields(r.Body, outcomeFields...)
	o := vendors.Outcome{Result: vendors.ByStatus(r.Status), VendorReference: body.Str(0)}
	code := body.Str(1)
	switch result := body.Str(2); {
	case o.Result == vendors.Succeeded && (result == "Refused" || result == "Error" || result == "Cancelled"):
		o.Result, o.Reason = vendors.Failed, result+": "+body.Str(3)
	case o.Result == vendors.Succeeded:
		o.Reason = result
	case strings.EqualFold(r.Header.Get("Transient-Error"), "true"), code == "704":
		o.Result, o.Reason = vendors.Unknown, "already processed or in progress at Adyen ("+code+")"
	case code == "703":
		o.Result, o.Reason = vendors.Failed, "Adyen's idempotency store was unavailable; nothing was processed (703)"
	default:
		o.Reason = strings.Trim(body.Str(4)+" "+code, " ")
	}
	return o
}

// Refusal implements Vendor: Adyen's ServiceError. A conflict is 422,
// Adyen's status for a request that fails validation.
func (Vendor) Refusal(status int, code, message string) vendors.Reply {
	if code == vendors.RefusalConflict {
		status = http.StatusUnprocessableEntity
	}
	return vendors.Reply{Status: status, Body: vendors.ErrorJSON(map[string]any{"status": status, "errorCode": code, "message": message, "errorType": "validation"})}
}

// Tag implements Tagger: metadata.ratchet_key of a payment, which Adyen
// echoes in additionalData["metadata.ratchet_key"] (tag.go).
func (Vendor) Tag(e vendors.Effect, body []byte, key string) ([]byte, error) {
	if e.Operation != "adyen.payments.create" {
		return body, nil
	}
	return vendors.TagMetadata(body, key)
}

// StoredFailure implements Recoverable. Adyen returns "the response to the
// first attempt" for a key it processed
// (https://docs.adyen.com/development-resources/api-idempotency), and a
// processed payment that did not go through is HTTP 200 with resultCode
// Refused, Error or Cancelled
// (https://docs.adyen.com/development-resources/response-handling). A 4xx
// (validation, 401, 403, 422, 704 in progress, 703 store unavailable) is
// never the first attempt's result.
func (Vendor) StoredFailure(r *vendors.Response) bool { return r.Status >= 200 && r.Status < 300 }

// RequestIDHeader implements Recoverable.
func (Vendor) RequestIDHeader() string { return "Psp-Reference" }

// Upstream implements Upstreamer: the test Checkout API; live hosts carry
// the merchant's prefix ({prefix}-checkout-live.adyenpayments.com), set in
// proxy.upstreams.adyen.
func (Vendor) Upstream() string { return "https://checkout-test.adyen.com" }
