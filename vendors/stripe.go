package vendors

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// Stripe is api.stripe.com.
//
// Sources: https://docs.stripe.com/api/idempotent_requests — header
// Idempotency-Key on every POST (on GET and DELETE it "has no effect"), at
// most 255 characters, keys may be pruned once at least 24 hours old, a
// replay returns the saved response with Idempotent-Replayed: true; 409
// idempotency_key_in_use while the first request is in progress.
// https://docs.stripe.com/error-handling — 429 and most 400s are answered
// before anything executes; 402 is a processed request that failed (a
// decline); 5xx and network errors are ambiguous. v1 bodies are
// form-encoded; v2 (/v2/...) bodies are JSON and also take the key on DELETE.
// A key reused on another endpoint is an error
// (https://docs.stripe.com/changelog/2015-09-03), so keys are not per
// endpoint. The account a call acts for is the API key's, or the connected
// account named by Stripe-Account or Stripe-Context
// (https://docs.stripe.com/context). stripe-go sends a key it mints for
// every POST (NewIdempotencyKey: UnixNano, "_", six base64url characters)
// and stripe-node one prefixed stripe-node-retry- when retries are on; such
// keys say nothing about two calls being one (KeyFromSDK). SDKs honour
// Stripe-Should-Retry: false, which Ratchet sends where a retry can only be
// refused again.
type Stripe struct{}

var _ Vendor = Stripe{}

// Name implements Vendor.
func (Stripe) Name() string { return "stripe" }

// Hosts implements Vendor.
func (Stripe) Hosts() []string { return []string{"api.stripe.com"} }

// KeyRule implements Vendor.
func (Stripe) KeyRule() KeyRule {
	return KeyRule{Location: InHeader, Name: "Idempotency-Key", MaxLen: 255, Enforced: true, RetentionHours: 24}
}

// stripeGoKey is the shape of the key stripe-go mints for a call.
var stripeGoKey = regexp.MustCompile(`^[0-9]{19}_[A-Za-z0-9_-]{6}$`)

// stripeKeyFromSDK reports whether an Idempotency-Key is one a Stripe SDK
// minted for a single call.
func stripeKeyFromSDK(k string) bool {
	return strings.HasPrefix(k, "stripe-node-retry-") || stripeGoKey.MatchString(k)
}

// stripeScope names the account a request acts for beyond the API key's:
// Stripe-Account alone as it always was, with Stripe-Context after it.
func stripeScope(h http.Header) string {
	scope := h.Get("Stripe-Account")
	if c := h.Get("Stripe-Context"); c != "" {
		scope += " context=" + c
	}
	return scope
}

// stripeNamespaces are path prefixes that group resources
// (/v1/checkout/sessions); the resource is namespace_resource.
var stripeNamespaces = map[string]bool{
	"apps": true, "billing": true, "billing_portal": true, "checkout": true, "climate": true,
	"entitlements": true, "financial_connections": true, "forwarding": true, "identity": true,
	"issuing": true, "radar": true, "reporting": true, "tax": true, "terminal": true,
	"test_helpers": true, "treasury": true,
}

// Classify implements Vendor.
func (s Stripe) Classify(r *Request) (Effect, bool) {
	parts := segments(r.Path)
	if !mutating(r.Method) || len(parts) < 2 || (parts[0] != "v1" && parts[0] != "v2") {
		return Effect{}, false
	}
	v2 := parts[0] == "v2"
	res := parts[1:]
	if (v2 || stripeNamespaces[res[0]]) && len(res) > 1 {
		res = append([]string{res[0] + "_" + res[1]}, res[2:]...)
	}
	e := Effect{EffectType: restType("stripe", r.Method, res), CallerKey: r.Header.Get("Idempotency-Key"),
		Scope: stripeScope(r.Header), Credential: r.Header.Get("Authorization")}
	e.KeyFromSDK = stripeKeyFromSDK(e.CallerKey)
	if r.Method == http.MethodPost || (v2 && r.Method == http.MethodDelete) {
		e.Key = s.KeyRule()
	}
	var body any
	if v2 {
		body = jsonObject(r.Body)
		e.Money = minorMoney(body, []string{"amount", "value"}, []string{"amount", "currency"})
		e.Counterparty = firstString(body, []string{"to", "recipient"}, []string{"customer"})
		return e, true
	}
	form, err := url.ParseQuery(string(r.Body))
	if err != nil {
		return e, true // still an effect; nothing more can be read
	}
	body = formMap(form)
	e.Money = minorMoney(body, []string{"amount"}, []string{"currency"})
	e.Counterparty = firstString(body, []string{"transfer_data[destination]"}, []string{"destination"},
		[]string{"customer"}, []string{"on_behalf_of"})
	return e, true
}

// formMap turns form values into the map shape get reads (first values).
func formMap(form url.Values) map[string]any {
	m := make(map[string]any, len(form))
	for k, v := range form {
		if len(v) > 0 {
			m[k] = v[0]
		}
	}
	return m
}

// Outcome implements Vendor.
func (Stripe) Outcome(r *Response) Outcome {
	body := jsonObject(r.Body)
	o := Outcome{Result: byStatus(r.Status), VendorReference: str(body, "id")}
	code := firstString(body, []string{"error", "code"}, []string{"error", "type"})
	switch {
	case o.Result == Succeeded && strings.EqualFold(r.Header.Get("Idempotent-Replayed"), "true"):
		o.Reason = "replayed by Stripe"
	case r.Status == http.StatusConflict:
		o.Reason = "a request with this key is in progress at Stripe (" + code + ")"
	case o.Result != Succeeded:
		o.Reason = code
		if id := str(body, "error", "payment_intent", "id"); id != "" {
			o.VendorReference = id
		}
	}
	return o
}

// Refusal implements Vendor: Stripe's {"error": {type, code, message}},
// which stripe-go turns into a *stripe.Error (a conflict into a
// *stripe.IdempotencyError, as Stripe's own). stripe-go and stripe-node
// retry a 409 and a 5xx unless told Stripe-Should-Retry: false, which a
// blocked call, one performed already and one whose outcome is unknown
// get: their retries could only be refused again.
func (Stripe) Refusal(status int, code, message string) Reply {
	typ := "invalid_request_error"
	if code == RefusalConflict {
		typ = "idempotency_error"
	}
	r := Reply{Status: status, Body: errorJSON(map[string]any{"error": map[string]any{
		"type": typ, "code": code, "message": message,
	}})}
	switch code {
	case RefusalBlocked, RefusalDuplicate, RefusalUnknown:
		r.Header = http.Header{"Stripe-Should-Retry": {"false"}}
	}
	return r
}
