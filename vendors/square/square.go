// Package square is what Ratchet knows about Square: where it takes an
// idempotency key, which requests are effects and what they cost, how its
// answers read, its error shape, what the adapters ask of it, and how its
// signed webhooks verify and read (webhook.go).
package square

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/ratchet-mcp/ratchet/vendors"
)

// Vendor is Square: connect.squareup.com (API v2, JSON bodies).
//
// Sources: Square's OpenAPI specification (square/connect-api-specification,
// api.json): the key is the body field idempotency_key, and only on requests
// whose schema defines it, with a length limit per endpoint: 45 for
// CreatePayment, RefundPayment, UpdatePayment; 192 for CreateOrder,
// UpdateOrder, PayOrder, CreatePaymentLink; 128 for invoices. For other
// endpoints Ratchet uses 45, the strictest, where it stamps at all.
// Money is {"amount": <minor units>, "currency": "USD"}. Errors are
// {"errors": [{"category", "code", "detail", "field"}]}
// (https://developer.squareup.com/reference/square/objects/Error); Square
// documents no retention period for keys (developer forum threads 28303,
// 28309). The SDKs leave the key to the caller (it is a required field).
// A key reused with other parameters is refused with IDEMPOTENCY_KEY_REUSED
// (https://developer.squareup.com/docs/working-with-apis/idempotency).
// The merchant is the access token's seller; location_id, where a request
// names one, selects it (location ids are the seller's own), and the token,
// which OAuth refreshes, is no part of the key's scope. A request that
// names no location (CreatePayment then uses the seller's main location)
// is not scoped by its token either, which would make a retry after a
// refresh a new call with a new idempotency_key, a double charge: the
// token is the Owner of its answer instead (see PayPal). Which seller a
// token belongs to is not known offline. A repeated Authorization header
// and a body with a duplicate key are refused.
type Vendor struct{}

var _ vendors.Vendor = Vendor{}

// Name implements Vendor.
func (Vendor) Name() string { return "square" }

// Hosts implements Vendor.
func (Vendor) Hosts() []string {
	return []string{"connect.squareup.com", "connect.squareupsandbox.com"}
}

// KeyRule implements Vendor.
func (Vendor) KeyRule() vendors.KeyRule {
	return vendors.KeyRule{Location: vendors.InBody, Name: "idempotency_key", MaxLen: 45, Enforced: true, PerEndpoint: true}
}

// squareEndpoint is one documented Square request that takes a key.
type squareEndpoint struct {
	method, pattern, operation string
	keyMax                     int // 0: the endpoint takes no idempotency_key
	// money are the paths of the Money objects the call moves, summed
	// (a payment charges tip_money on top of amount_money).
	money        [][]string
	counterparty [][]string
}

var squareEndpoints = []squareEndpoint{
	{http.MethodPost, "payments", "square.payments.create", 45, [][]string{{"amount_money"}, {"tip_money"}}, [][]string{{"customer_id"}}},
	{http.MethodPut, "payments/{id}", "square.payments.update", 45, nil, nil},
	// Its body's idempotency_key names the payment to cancel: never stamp it.
	{http.MethodPost, "payments/cancel", "square.payments.cancel_by_idempotency_key", 0, nil, nil},
	{http.MethodPost, "payments/{id}/complete", "square.payments.complete", 0, nil, nil},
	{http.MethodPost, "payments/{id}/cancel", "square.payments.cancel", 0, nil, nil},
	{http.MethodPost, "refunds", "square.refunds.create", 45, [][]string{{"amount_money"}}, [][]string{{"customer_id"}}},
	{http.MethodPost, "orders", "square.orders.create", 192, nil, [][]string{{"order", "customer_id"}}},
	{http.MethodPut, "orders/{id}", "square.orders.update", 192, nil, nil},
	{http.MethodPost, "orders/{id}/pay", "square.orders.pay", 192, nil, nil},
	{http.MethodPost, "invoices", "square.invoices.create", 128, nil, [][]string{{"invoice", "primary_recipient", "customer_id"}}},
	{http.MethodPost, "invoices/{id}/publish", "square.invoices.publish", 128, nil, nil},
	{http.MethodPost, "checkout/payment-links", "square.payment_links.create", 192, [][]string{{"quick_pay", "price_money"}}, nil},
	{http.MethodPost, "customers", "square.customers.create", 45, nil, nil},
}

// matchPattern matches path parts against a pattern where {id} is any one
// segment.
func matchPattern(pattern string, parts []string) bool {
	p := strings.Split(pattern, "/")
	if len(p) != len(parts) {
		return false
	}
	for i := range p {
		if p[i] != "{id}" && p[i] != parts[i] {
			return false
		}
	}
	return true
}

// Classify implements Vendor.
func (s Vendor) Classify(r *vendors.Request) (vendors.Effect, bool) {
	return vendors.Typed(s.classify(r))
}

func (s Vendor) classify(r *vendors.Request) (vendors.Effect, bool) {
	parts := vendors.Segments(r.Path)
	if !vendors.Mutating(r.Method) || len(parts) < 2 || parts[0] != "v2" {
		return vendors.Effect{}, false
	}
	parts = parts[1:]
	if r.Method == http.MethodPost && squareReads[parts[len(parts)-1]] {
		return vendors.Effect{}, false
	}
	body := vendors.JSONObject(r.Body)
	for _, ep := range squareEndpoints {
		if ep.method != r.Method || !matchPattern(ep.pattern, parts) {
			continue
		}
		e := vendors.Effect{Operation: ep.operation, Counterparty: vendors.FirstString(body, ep.counterparty...)}
		e.Merchant, e.Owner, e.Refuse = squareMerchant(body, r)
		if ep.keyMax > 0 {
			e.Key = s.KeyRule()
			e.Key.MaxLen = ep.keyMax
			e.CallerKey = vendors.Str(body, "idempotency_key")
		}
		e.RefuseFor(squareMoney(&e, body, ep.money))
		return e, true
	}
	// Square mixes namespaces and ids in paths (/v2/loyalty/accounts), so an
	// unknown endpoint is named by its first segment and method only.
	e := vendors.Effect{Operation: "square." + vendors.Part(parts[0]) + "." + strings.ToLower(r.Method)}
	e.Merchant, e.Owner, e.Refuse = squareMerchant(body, r)
	return e, true
}

// squareMoney sets e.Money to the sum of the Money objects at paths, and
// returns why the request is refused: one is unreadable, or a second one
// names an amount without a currency, or the sum cannot be counted.
func squareMoney(e *vendors.Effect, body any, paths [][]string) string {
	for i, p := range paths {
		amount, currency := append(p[:len(p):len(p)], "amount"), append(p[:len(p):len(p)], "currency")
		m, refuse := vendors.MinorAmount(body, amount, currency)
		if refuse == "" && m == nil && i > 0 && vendors.Get(body, amount...) != nil {
			refuse = "the amount in " + strings.Join(p, ".") + " comes without a three-letter currency"
		}
		if refuse == "" {
			e.Money, refuse = vendors.AddMoney(e.Money, m, strings.Join(p, "."))
		}
		if refuse != "" {
			e.Money = nil
			return refuse
		}
	}
	return ""
}

// squareMerchant returns the location a request names; or else, as the
// owner of its answer, its access token (OAuth or personal, which cannot
// be told apart, so never a scope); and why it is refused, if it is.
func squareMerchant(body any, r *vendors.Request) (merchant, owner, refuse string) {
	refuse = vendors.SingleHeaders(r.Header, "Authorization")
	if refuse == "" {
		refuse = vendors.StrictJSON(r.Body)
	}
	if loc := vendors.FirstString(body, []string{"location_id"}, []string{"order", "location_id"},
		[]string{"quick_pay", "location_id"}, []string{"invoice", "location_id"}); loc != "" {
		return "location=" + loc, "", refuse
	}
	return "", r.Header.Get("Authorization"), refuse
}

// squareReads are the last path segments of Square POSTs that only read
// (SearchOrders, BatchRetrieveOrders, CalculateOrder, …).
var squareReads = map[string]bool{"search": true, "batch-retrieve": true, "calculate": true, "bulk-retrieve": true}

// squareObjects are the response fields that hold the object an effect
// created, in order of preference.
var squareObjects = []string{"payment", "refund", "order", "invoice", "payment_link", "customer", "subscription", "card"}

// outcomeFields are what Outcome reads of an answer: each of squareObjects'
// id, in order, then the first error's category and code.
var outcomeFields = func() [][]string {
	var f [][]string
	for _, k := range squareObjects {
		f = append(f, []string{k, "id"})
	}
	return append(f, []string{"errors", "0", "category"}, []string{"errors", "0", "code"})
}()

// Outcome implements Vendor.
func (Vendor) Outcome(r *vendors.Response) vendors.Outcome {
	body := vendors.ReadFields(r.Body, outcomeFields...)
	o := vendors.Outcome{Result: vendors.ByStatus(r.Status)}
	for i := range squareObjects {
		if id := body.Str(i); id != "" {
			o.VendorReference = id
			break
		}
	}
	if o.Result != vendors.Succeeded {
		o.Reason = strings.Trim(body.Str(len(squareObjects))+" "+body.Str(len(squareObjects)+1), " ")
	}
	return o
}

// Refusal implements Vendor: Square's {"errors": [...]}, which the SDKs
// show at any status; a conflict carries Square's own code for it.
func (Vendor) Refusal(status int, code, message string) vendors.Reply {
	category := "INVALID_REQUEST_ERROR"
	if status == http.StatusTooManyRequests {
		category = "RATE_LIMIT_ERROR"
	}
	code = strings.ToUpper(code)
	if code == strings.ToUpper(vendors.RefusalConflict) {
		code = "IDEMPOTENCY_KEY_REUSED"
	}
	return vendors.Reply{Status: status, Body: vendors.ErrorJSON(map[string]any{"errors": []any{map[string]any{
		"category": category, "code": code, "detail": message,
	}}})}
}

// Tag implements Tagger: a payment's reference_id (at most 40
// characters), which Square echoes in data.object.payment.reference_id;
// the caller's own reference stays (tag.go).
func (Vendor) Tag(e vendors.Effect, body []byte, key string) ([]byte, error) {
	if e.Operation != "square.payments.create" {
		return body, nil
	}
	val, _ := json.Marshal(key)
	return vendors.AddMember(body, nil, "reference_id", val), nil
}

// Upstream implements Upstreamer: production (the sandbox is
// https://connect.squareupsandbox.com).
func (Vendor) Upstream() string { return "https://connect.squareup.com" }
