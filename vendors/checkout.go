package vendors

import (
	"net/http"
	"strings"
)

// Checkout is Checkout.com's unified payments API (api.checkout.com).
//
// Sources: https://www.checkout.com/docs/payments/manage-payments/idempotency
// — header Cko-Idempotency-Key on /payments, captures, refunds, voids and
// /transfers; keys kept 24 hours; a request in progress with the same key
// answers 409 ("wait at least 30 seconds"); only 2xx answers are saved, and
// a 4xx is not executed. No length limit is published (MaxLen 0).
// https://www.checkout.com/docs/payments/accept-payments/format-the-amount-value
// — amount is an integer in minor units. A 201 with "approved": false is a
// declined payment. Errors are {request_id, error_type, error_codes}.
type Checkout struct{}

var _ Vendor = Checkout{}

// Name implements Vendor.
func (Checkout) Name() string { return "checkout" }

// Hosts implements Vendor.
func (Checkout) Hosts() []string { return []string{"api.checkout.com", "api.sandbox.checkout.com"} }

// KeyRule implements Vendor.
func (Checkout) KeyRule() KeyRule {
	return KeyRule{Location: InHeader, Name: "Cko-Idempotency-Key", Enforced: true, RetentionHours: 24}
}

// Classify implements Vendor.
func (c Checkout) Classify(r *Request) (Effect, bool) {
	parts := segments(r.Path)
	if !mutating(r.Method) || len(parts) == 0 {
		return Effect{}, false
	}
	body := jsonObject(r.Body)
	e := Effect{EffectType: restType("checkout", r.Method, parts), CallerKey: r.Header.Get("Cko-Idempotency-Key"),
		Money:        minorMoney(body, []string{"amount"}, []string{"currency"}),
		Counterparty: firstString(body, []string{"customer", "id"}, []string{"customer", "email"}, []string{"destination", "id"}),
	}
	switch {
	case r.Method == http.MethodPost && len(parts) == 1 && (parts[0] == "payments" || parts[0] == "transfers"):
		e.Key = c.KeyRule()
	case r.Method == http.MethodPost && len(parts) == 3 && parts[0] == "payments":
		// captures, refunds, voids: the action, not a nested collection.
		e.Key = c.KeyRule()
		e.EffectType = "checkout.payments." + strings.TrimSuffix(part(parts[2]), "s")
	}
	return e, true
}

// Outcome implements Vendor.
func (Checkout) Outcome(r *Response) Outcome {
	body := jsonObject(r.Body)
	o := Outcome{Result: byStatus(r.Status), VendorReference: firstString(body, []string{"id"}, []string{"action_id"})}
	switch approved, ok := get(body, "approved").(bool); {
	case o.Result == Succeeded && ok && !approved:
		o.Result, o.Reason = Failed, "declined: "+str(body, "response_summary")
	case o.Result != Succeeded:
		o.Reason = str(body, "error_type")
	}
	return o
}

// ErrorBody implements Vendor: Checkout.com's error object.
func (Checkout) ErrorBody(_ int, code, message string) []byte {
	return errorJSON(map[string]any{"request_id": "ratchet", "error_type": code, "error_codes": []string{message}})
}
